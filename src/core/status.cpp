#include "core/status.h"

#include <cstdarg>
#include <cstdio>

namespace gdn {

Status fail(gdn_status code, const char *format, ...) {
    char buffer[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    return Status{code, buffer};
}

}  // namespace gdn
