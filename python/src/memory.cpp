// Huge pages for the large host tensors gdn.torch allocates (outputs, gradients, normalised q/k).
//
// PyTorch's CPU allocator mostly returns fresh, untouched pages for tens-of-MB tensors (glibc maps
// such blocks anew, above its mmap threshold), so the first write of every 4 KiB page is a fault
// that zeroes it: measured at about 2.8 us per page here, 70 ms for one 100 MB output at
// T = 4096. Asking the kernel for transparent huge pages on the block before gdn writes it (what
// PyTorch itself does for all of its blocks under THP_MEM_ALLOC_ENABLE=1) makes that one fault
// per 2 MiB. Only the 2 MiB-aligned middle of the array's own bytes is advised. The advice
// changes page sizes, never contents, and is ignored where the kernel does not offer it; on a
// block the allocator later reuses for something else it stays, which costs at most some
// background page merging, never data.
#include "memory.h"

#include <cstdint>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gdn_python {
namespace {

constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
constexpr size_t kMinBytes = size_t(8) << 20;  // smaller blocks are mostly reused heap memory

bool advise_huge_pages(const nb::ndarray<> &a) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (a.device_type() != nb::device::cpu::value || a.nbytes() < kMinBytes) return false;
    // Only a dense array's bytes are its own (an expanded view's nbytes overstates its storage).
    int64_t dense_stride = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
        if (a.shape(i) > 1 && a.stride(i) != dense_stride) return false;
        dense_stride *= static_cast<int64_t>(a.shape(i));
    }
    const uintptr_t begin = reinterpret_cast<uintptr_t>(a.data()), end = begin + a.nbytes();
    const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1), last = end & ~(kHugePage - 1);
    if (last <= first) return false;
    return madvise(reinterpret_cast<void *>(first), last - first, MADV_HUGEPAGE) == 0;
#else
    (void)a;
    return false;
#endif
}

}  // namespace

void bind_memory(nb::module_ &m) {
    m.attr("huge_page_min_bytes") = kMinBytes;  // smaller arrays are never advised: callers may skip the call
    m.def("advise_huge_pages", &advise_huge_pages, nb::arg("array"),
          "asks for transparent huge pages under a large, contiguous host array not yet written; "
          "True when the kernel took the advice");
}

}  // namespace gdn_python
