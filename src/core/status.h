// Status: a gdn_status code with the message that gdn_last_error reports.
#pragma once

#include <string>

#include "gdn/gdn.h"

namespace gdn {

struct Status {
    gdn_status code = GDN_OK;
    std::string message;

    bool ok() const { return code == GDN_OK; }
    static Status success() { return {}; }
};

// printf-style constructor for failures: fail(GDN_ERROR_SHAPE, "k.ne[1] = %lld ...", ...).
Status fail(gdn_status code, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

}  // namespace gdn

// Returns from the enclosing function when a Status-returning expression failed.
#define GDN_TRY(expr)                          \
    do {                                       \
        ::gdn::Status gdn_try_status_ = (expr); \
        if (!gdn_try_status_.ok()) return gdn_try_status_; \
    } while (0)
