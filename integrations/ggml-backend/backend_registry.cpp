// libggml-gdn's ggml backend: one registry ("GDN") with one ACCEL device on host memory, whose
// backends compute the nodes of nodes.h on gdn's cpu backend. ggml_backend_load finds it
// through ggml_backend_init (GGML_BACKEND_DL_IMPL below), e.g. when GGML_BACKEND_PATH names this
// library; an ACCEL device is one the scheduler gives only the ops it supports, on buffers of
// the CPU's type, so nothing is copied and everything else stays on the CPU backend.
//
// Threads: a node runs as shares (gdn_forward_share, rows for L2_NORM) on an OpenMP team of the
// count ggml_backend_set_n_threads gives (llama.cpp passes its -t / -tb), unless the environment
// variable GDN_GGML_THREADS fixes it; 0 or unset = OpenMP's default (all cores). ggml's CPU
// backend runs on OpenMP too (llama.cpp's default build): the same team of threads then takes
// turns between the two backends rather than two pools competing for the cores (ggml's OpenMP
// threads spin a while after each of its graph parts). The results do not depend on the count
// (gdn's shares give the same bits for any).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include <ggml-backend-impl.h>
#include <ggml-backend.h>

#include "gdn/gdn.h"
#include "nodes.h"

// The interface structs below are filled in the order of this version's ggml-backend-impl.h;
// another version must be read again before this builds against it (ggml_backend_load refuses
// a library whose registry reports another version at run time).
static_assert(GGML_BACKEND_API_VERSION == 2, "libggml-gdn is written against ggml's backend interface version 2");

namespace ggml_gdn {
namespace {

constexpr const char *kName = "GDN";

// GDN_GGML_THREADS, when set to a non-negative integer; -1 otherwise.
int parse_threads_environment() {
    const char *text = std::getenv("GDN_GGML_THREADS");
    if (text == nullptr || *text == '\0') return -1;
    char *end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (*end != '\0' || n < 0 || n > GDN_MAX_THREADS) {
        std::fprintf(stderr, "ggml-gdn: ignoring GDN_GGML_THREADS=\"%s\" (want 0..%d, 0 = all cores)\n", text,
                     GDN_MAX_THREADS);
        return -1;
    }
    return static_cast<int>(n);
}

// Read once per process: a bad value is reported once, not at every node of every graph.
int threads_from_environment() {
    static const int threads = parse_threads_environment();
    return threads;
}

// One backend (stream): the thread count it was given and the gdn context its shares run on
// (one thread of its own: the work runs on the OpenMP team; each thread keeps its scratch).
struct Backend {
    int n_threads = 0;
    gdn_context *ctx = nullptr;
    std::vector<gdn_status> share_status;  // each share's outcome, by thread

    ~Backend() { gdn_context_free(ctx); }

    int threads() const {
        const int fixed = threads_from_environment();
        const int want = fixed >= 0 ? fixed : n_threads;
        return std::min(want > 0 ? want : omp_get_max_threads(), GDN_MAX_THREADS);
    }

    gdn_context *context(std::string &why) {
        if (ctx != nullptr) return ctx;
        gdn_context_params params = gdn_context_default_params();
        params.n_threads = 1;
        if (gdn_context_create("cpu", &params, &ctx) != GDN_OK) {
            why = gdn_last_create_error();
            ctx = nullptr;
        }
        return ctx;
    }
};

ggml_guid_t guid() {
    static ggml_guid id = {0x67, 0x64, 0x6e, 0x2d, 0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x62, 0x61, 0x63, 0x6b, 0x65, 0x6e, 0x64};
    return &id;
}

const char *backend_name(ggml_backend_t) { return kName; }

void backend_free(ggml_backend_t backend) {
    delete static_cast<Backend *>(backend->context);
    delete backend;
}

bool compute_delta_net(Backend &self, ggml_tensor *node) {
    std::string why;
    gdn_context *ctx = self.context(why);
    gdn_status status = ctx == nullptr ? GDN_ERROR_BACKEND : delta_net_prepare(node, why);
    if (status == GDN_OK) {
        const int nth = self.threads();
        self.share_status.assign(nth, GDN_OK);  // sized once per thread count: no allocation per call
        int team = nth;
#pragma omp parallel num_threads(nth)
        {
            const int ith = omp_get_thread_num();
            if (ith == 0) team = omp_get_num_threads();  // OpenMP may give fewer threads than asked
            self.share_status[ith] = delta_net_share(ctx, node, ith, omp_get_num_threads());
        }
        for (int i = 0; i < team && status == GDN_OK; ++i) status = self.share_status[i];
        if (status != GDN_OK) why = gdn_last_error(ctx);  // the team has joined: no share writes it now
    }
    if (status != GDN_OK)
        std::fprintf(stderr, "ggml-gdn: %s (\"%s\"): %s: %s\n", ggml_op_desc(node), node->name, gdn_status_string(status),
                     why.c_str());
    return status == GDN_OK;
}

void compute_l2_norm(Backend &self, ggml_tensor *node) {
#pragma omp parallel num_threads(self.threads())
    l2_norm_share(node, omp_get_thread_num(), omp_get_num_threads());
}

ggml_status graph_compute(ggml_backend_t backend, ggml_cgraph *graph) {
    Backend &self = *static_cast<Backend *>(backend->context);
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        ggml_tensor *node = ggml_graph_node(graph, i);
        if ((node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0 || is_layout_only(node)) continue;
        switch (node->op) {
            case GGML_OP_GATED_DELTA_NET:
                if (!compute_delta_net(self, node)) return GGML_STATUS_FAILED;
                break;
            case GGML_OP_L2_NORM:
                compute_l2_norm(self, node);
                break;
            default:
                std::fprintf(stderr, "ggml-gdn: %s (\"%s\") is not an op this backend computes\n", ggml_op_desc(node),
                             node->name);
                return GGML_STATUS_FAILED;
        }
    }
    return GGML_STATUS_SUCCESS;
}

const ggml_backend_i kBackendInterface = {
    /* .get_name            = */ backend_name,
    /* .free                = */ backend_free,
    /* .set_tensor_async    = */ nullptr,
    /* .get_tensor_async    = */ nullptr,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ nullptr,
    /* .synchronize         = */ nullptr,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ graph_compute,
    /* .event_record        = */ nullptr,
    /* .event_wait          = */ nullptr,
    /* .graph_optimize      = */ nullptr,
};

void set_n_threads(ggml_backend_t backend, int n_threads) {
    if (backend == nullptr || !ggml_guid_matches(backend->guid, guid()) || n_threads < 0) return;
    static_cast<Backend *>(backend->context)->n_threads = n_threads;
}

// The device.

const char *device_name(ggml_backend_dev_t) { return kName; }

const char *device_description(ggml_backend_dev_t) {
    static const std::string text = std::string("gdn ") + gdn_version() + " (gated delta net on the cpu)";
    return text.c_str();
}

void device_memory(ggml_backend_dev_t, size_t *free, size_t *total) {
    *free = 0;  // host memory, reported by the CPU device
    *total = 0;
}

enum ggml_backend_dev_type device_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_ACCEL; }

void device_props(ggml_backend_dev_t dev, ggml_backend_dev_props *props) {
    props->name = device_name(dev);
    props->description = device_description(dev);
    props->type = device_type(dev);
    props->device_id = nullptr;
    device_memory(dev, &props->memory_free, &props->memory_total);
    props->caps = {/* .async = */ false, /* .host_buffer = */ false, /* .buffer_from_host_ptr = */ false,
                   /* .events = */ false, /* .mmap_support = */ false};
}

ggml_backend_t device_init_backend(ggml_backend_dev_t dev, const char *) {
    return new ggml_backend{/* .guid = */ guid(), /* .iface = */ kBackendInterface, /* .device = */ dev,
                            /* .context = */ new Backend};
}

ggml_backend_buffer_type_t device_buffer_type(ggml_backend_dev_t) { return ggml_backend_cpu_buffer_type(); }

bool device_supports_op(ggml_backend_dev_t, const ggml_tensor *op) { return supports(op); }

bool device_supports_buft(ggml_backend_dev_t, ggml_backend_buffer_type_t buft) { return ggml_backend_buft_is_host(buft); }

const ggml_backend_device_i kDeviceInterface = {
    /* .get_name             = */ device_name,
    /* .get_description      = */ device_description,
    /* .get_memory           = */ device_memory,
    /* .get_type             = */ device_type,
    /* .get_props            = */ device_props,
    /* .init_backend         = */ device_init_backend,
    /* .get_buffer_type      = */ device_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ device_supports_op,
    /* .supports_buft        = */ device_supports_buft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// The registry.

const char *registry_name(ggml_backend_reg_t) { return kName; }

size_t registry_device_count(ggml_backend_reg_t) { return 1; }

ggml_backend_dev_t registry_device(ggml_backend_reg_t reg, size_t index) {
    static ggml_backend_device device = {/* .iface = */ kDeviceInterface, /* .reg = */ reg, /* .context = */ nullptr};
    return index == 0 ? &device : nullptr;
}

void *registry_proc_address(ggml_backend_reg_t, const char *name) {
    if (name != nullptr && std::strcmp(name, "ggml_backend_set_n_threads") == 0)
        return reinterpret_cast<void *>(static_cast<ggml_backend_set_n_threads_t>(set_n_threads));
    return nullptr;
}

const ggml_backend_reg_i kRegistryInterface = {
    /* .get_name         = */ registry_name,
    /* .get_device_count = */ registry_device_count,
    /* .get_device       = */ registry_device,
    /* .get_proc_address = */ registry_proc_address,
};

ggml_backend_reg_t registry() {
    static ggml_backend_reg reg = {/* .api_version = */ GGML_BACKEND_API_VERSION, /* .iface = */ kRegistryInterface,
                                   /* .context = */ nullptr};
    return &reg;
}

}  // namespace
}  // namespace ggml_gdn

static ggml_backend_reg_t ggml_gdn_registry() { return ggml_gdn::registry(); }

GGML_BACKEND_DL_IMPL(ggml_gdn_registry)
