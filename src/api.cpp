// The C API: contexts, dispatch to a backend, and the last-error message. No exception leaves
// it: every call's work runs through run_guarded, which turns one into a status and message.
#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/validate.h"
#include "gdn/gdn.h"

struct gdn_context {
    std::unique_ptr<gdn::Backend> backend;
    std::string last_error;
    std::mutex error_mutex;  // shares of a call (gdn_forward_share) may finish concurrently
};

namespace {

thread_local std::string g_create_error;

std::string lower(const char *s) {
    std::string r(s);
    std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return r;
}

gdn::Status make_backend(const std::string &name, const gdn_context_params &params, std::unique_ptr<gdn::Backend> &out) {
    if (name == "ref") return gdn::make_ref_backend(params, out);
    if (name == "cpu") return gdn::make_cpu_backend(params, out);
    if (name == "cuda") return gdn::make_cuda_backend(params, out);
    return gdn::fail(GDN_ERROR_UNKNOWN_BACKEND, "unknown backend \"%s\" (known: ref, cpu, cuda)", name.c_str());
}

// Sets a message where allocating it may fail: then the message is lost, never the status.
gdn_status store(std::string &message, gdn_status code, const char *text, const char *detail = "") noexcept {
    try {
        message.assign(text).append(detail);
    } catch (...) {
        message.clear();
    }
    return code;
}

// Runs fn (returning a gdn::Status) and gives its code and, in `message`, its message; an
// exception becomes GDN_ERROR_OUT_OF_MEMORY (std::bad_alloc) or GDN_ERROR_BACKEND.
template <class Fn>
gdn_status run_guarded(std::string &message, Fn &&fn) noexcept {
    try {
        gdn::Status s = fn();
        message.swap(s.message);
        return s.code;
    } catch (const std::bad_alloc &) {
        return store(message, GDN_ERROR_OUT_OF_MEMORY, "out of host memory");
    } catch (const std::exception &e) {
        return store(message, GDN_ERROR_BACKEND, "internal error: ", e.what());
    } catch (...) {
        return store(message, GDN_ERROR_BACKEND, "internal error: an exception that is not a std::exception");
    }
}

// A call on a context: its message becomes the context's last error. A share that succeeds
// leaves it as it is, so that after a call's shares have all returned it holds the message of one
// that failed (the shares finish in any order).
template <class Fn>
gdn_status guarded(gdn_context *ctx, bool share, Fn &&fn) noexcept {
    std::string message;
    const gdn_status code = run_guarded(message, fn);
    if (share && code == GDN_OK) return code;
    std::lock_guard<std::mutex> lock(ctx->error_mutex);
    ctx->last_error.swap(message);
    return code;
}

gdn::Status check_params(const gdn_context_params &p) {
    const std::pair<const char *, int> fields[] = {{"n_threads", p.n_threads}, {"device", p.device}, {"chunk_size", p.chunk_size}};
    for (const auto &[name, value] : fields)
        if (value < 0) return gdn::fail(GDN_ERROR_INVALID_ARGUMENT, "params: %s = %d is negative", name, value);
    // More is a mistake (a count of bytes, an uninitialised field), not a machine.
    if (p.n_threads > GDN_MAX_THREADS)
        return gdn::fail(GDN_ERROR_INVALID_ARGUMENT, "params: n_threads = %d is more than %d, the most a context runs (0 = every core)",
                         p.n_threads, GDN_MAX_THREADS);
    return {};
}

gdn::Status create_context(const char *backend, const gdn_context_params &params, gdn_context *&out) {
    GDN_TRY(check_params(params));
    auto ctx = std::make_unique<gdn_context>();
    gdn::Status s;
    if (backend != nullptr) {
        s = make_backend(lower(backend), params, ctx->backend);
    } else {
        // Fastest available first.
        for (const char *name : {"cuda", "cpu", "ref"}) {
            s = make_backend(name, params, ctx->backend);
            if (s.ok()) break;
        }
    }
    if (s.ok()) out = ctx.release();
    return s;
}

}  // namespace

namespace {

// The host vectors the values of cu_seqlens and state_indices are read into: lent to each call
// by its thread and kept for the thread's next call (in a context or another), so that a
// decoding call with no more sequences than an earlier one allocates nothing for them.
template <class Args>
class LentIndexVectors {
public:
    explicit LentIndexVectors(Args &args) : args_(args) { swap(); }
    ~LentIndexVectors() { swap(); }
    LentIndexVectors(const LentIndexVectors &) = delete;
    LentIndexVectors &operator=(const LentIndexVectors &) = delete;

private:
    void swap() {
        thread_local std::vector<int64_t> offsets, slots;
        args_.offsets.swap(offsets);
        args_.state_slots.swap(slots);
    }
    Args &args_;
};

// The values of cu_seqlens and state_indices, read by the backend (they may live on a device)
// and checked.
template <class Args>
gdn::Status read_indices(gdn_context *ctx, Args &args) {
    if (args.cu_seqlens != nullptr) {
        GDN_TRY(ctx->backend->read_offsets(*args.cu_seqlens, args.offsets));
        GDN_TRY(gdn::validate_offsets(args.dims, args.offsets));
    }
    if (args.state_indices != nullptr) {
        GDN_TRY(ctx->backend->read_offsets(*args.state_indices, args.state_slots));
        GDN_TRY(gdn::validate_state_slots(args.dims, args.state_slots));
    }
    return {};
}

// Sequences without tokens compute nothing: their states pass through (core/empty_sequences.h).
// The list is made before the backend runs (it allocates: a call that runs out of memory there
// has written nothing) and copied after it, so that a call that fails leaves every output as it was.
gdn::Status copy_empty_sequences(gdn_context *ctx, const std::vector<gdn::StateCopy> &copies) {
    for (const gdn::StateCopy &c : copies) GDN_TRY(ctx->backend->copy_state(c));
    return {};
}

// How a call runs: a dry run (check), the whole call, or share ith of nth (gdn_forward_share).
struct Mode {
    bool compute = true, share = false;
    int ith = 0, nth = 1;
    static Mode check() { return {false, false, 0, 1}; }
    static Mode whole() { return {true, false, 0, 1}; }
    static Mode part(int ith, int nth) { return {true, true, ith, nth}; }
};

gdn::Status check_share(const Mode &m) {
    // nth is bounded as a context's n_threads is: a share's schedule takes time and memory in nth.
    if (m.nth < 1 || m.nth > GDN_MAX_THREADS || m.ith < 0 || m.ith >= m.nth)
        return gdn::fail(GDN_ERROR_INVALID_ARGUMENT, "share ith = %d of nth = %d: need 1 <= nth <= %d and 0 <= ith < nth",
                         m.ith, m.nth, GDN_MAX_THREADS);
    return {};
}

gdn_status run_forward(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *out, const gdn_tensor *states, Mode m) {
    if (ctx == nullptr) return GDN_ERROR_INVALID_ARGUMENT;
    return guarded(ctx, m.share, [&]() -> gdn::Status {
        GDN_TRY(check_share(m));
        gdn::ForwardArgs args;
        GDN_TRY(gdn::validate_forward(p, out, states, args));
        const LentIndexVectors lent(args);
        GDN_TRY(read_indices(ctx, args));
        GDN_TRY(ctx->backend->supports(args.dims, false));
        if (!m.compute || (args.out == nullptr && args.states == nullptr)) return {};  // nothing asked for
        const std::vector<gdn::StateCopy> copies =
            m.ith == 0 ? gdn::empty_sequence_copies(args) : std::vector<gdn::StateCopy>{};
        if (gdn::sequences_with_tokens(args.dims, args.offsets) > 0)
            GDN_TRY(m.share ? ctx->backend->forward_share(args, m.ith, m.nth) : ctx->backend->forward(args));
        return copy_empty_sequences(ctx, copies);
    });
}

gdn_status run_backward(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                        const gdn_grads *grads, Mode m) {
    if (ctx == nullptr) return GDN_ERROR_INVALID_ARGUMENT;
    return guarded(ctx, m.share, [&]() -> gdn::Status {
        GDN_TRY(check_share(m));
        gdn::BackwardArgs args;
        GDN_TRY(gdn::validate_backward(p, d_out, d_states, grads, args));
        const LentIndexVectors lent(args);
        GDN_TRY(read_indices(ctx, args));
        GDN_TRY(ctx->backend->supports(args.dims, true));
        const bool wanted = args.dq || args.dk || args.dv || args.dg || args.dbeta || args.ds0;
        if (!m.compute || !wanted) return {};  // nothing asked for
        const std::vector<gdn::StateCopy> copies =
            m.ith == 0 ? gdn::empty_sequence_copies(args) : std::vector<gdn::StateCopy>{};
        if (gdn::sequences_with_tokens(args.dims, args.offsets) > 0)
            GDN_TRY(m.share ? ctx->backend->backward_share(args, m.ith, m.nth) : ctx->backend->backward(args));
        return copy_empty_sequences(ctx, copies);
    });
}

}  // namespace

extern "C" {

gdn_context_params gdn_context_default_params(void) {
    gdn_context_params p;
    p.n_threads = 0;
    p.device = 0;
    p.stream = nullptr;
    p.chunk_size = 0;
    return p;
}

gdn_status gdn_context_create(const char *backend, const gdn_context_params *params, gdn_context **out) {
    std::string message;
    gdn_status code = GDN_ERROR_INVALID_ARGUMENT;
    if (out == nullptr) {
        store(message, code, "out is NULL");
    } else {
        *out = nullptr;
        const gdn_context_params prm = params ? *params : gdn_context_default_params();
        code = run_guarded(message, [&] { return create_context(backend, prm, *out); });
    }
    g_create_error.swap(message);
    return code;
}

void gdn_context_free(gdn_context *ctx) { delete ctx; }

const char *gdn_context_backend(const gdn_context *ctx) { return ctx ? ctx->backend->name() : ""; }

const char *gdn_last_error(const gdn_context *ctx) { return ctx ? ctx->last_error.c_str() : "ctx is NULL"; }

const char *gdn_last_create_error(void) { return g_create_error.c_str(); }

const char *gdn_status_string(gdn_status status) {
    switch (status) {
        case GDN_OK: return "GDN_OK";
        case GDN_ERROR_INVALID_ARGUMENT: return "GDN_ERROR_INVALID_ARGUMENT";
        case GDN_ERROR_SHAPE: return "GDN_ERROR_SHAPE";
        case GDN_ERROR_LAYOUT: return "GDN_ERROR_LAYOUT";
        case GDN_ERROR_TYPE: return "GDN_ERROR_TYPE";
        case GDN_ERROR_ALIAS: return "GDN_ERROR_ALIAS";
        case GDN_ERROR_UNSUPPORTED: return "GDN_ERROR_UNSUPPORTED";
        case GDN_ERROR_OUT_OF_MEMORY: return "GDN_ERROR_OUT_OF_MEMORY";
        case GDN_ERROR_BACKEND: return "GDN_ERROR_BACKEND";
        case GDN_ERROR_UNKNOWN_BACKEND: return "GDN_ERROR_UNKNOWN_BACKEND";
    }
    return "unknown gdn_status";
}


gdn_status gdn_forward(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *out, const gdn_tensor *states) {
    return run_forward(ctx, p, out, states, Mode::whole());
}

gdn_status gdn_check_forward(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *out, const gdn_tensor *states) {
    return run_forward(ctx, p, out, states, Mode::check());
}

gdn_status gdn_forward_share(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *out, const gdn_tensor *states,
                             int ith, int nth) {
    return run_forward(ctx, p, out, states, Mode::part(ith, nth));
}

gdn_status gdn_backward(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                        const gdn_grads *grads) {
    return run_backward(ctx, p, d_out, d_states, grads, Mode::whole());
}

gdn_status gdn_check_backward(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                              const gdn_grads *grads) {
    return run_backward(ctx, p, d_out, d_states, grads, Mode::check());
}

gdn_status gdn_backward_share(gdn_context *ctx, const gdn_problem *p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                              const gdn_grads *grads, int ith, int nth) {
    return run_backward(ctx, p, d_out, d_states, grads, Mode::part(ith, nth));
}

uint64_t gdn_context_workspace_bytes(const gdn_context *ctx) { return ctx ? ctx->backend->workspace_bytes() : 0; }

void gdn_context_release_workspace(gdn_context *ctx) {
    if (ctx != nullptr) ctx->backend->release_workspace();
}

#define GDN_STRINGIFY_(x) #x
#define GDN_STRINGIFY(x) GDN_STRINGIFY_(x)

const char *gdn_version(void) {
    return GDN_STRINGIFY(GDN_VERSION_MAJOR) "." GDN_STRINGIFY(GDN_VERSION_MINOR) "." GDN_STRINGIFY(GDN_VERSION_PATCH);
}

int gdn_version_number(void) { return GDN_VERSION_NUMBER; }

int gdn_backend_available(const char *backend) {
    if (backend == nullptr) return 0;
    std::unique_ptr<gdn::Backend> b;
    try {
        return make_backend(lower(backend), gdn_context_default_params(), b).ok() ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

}  // extern "C"
