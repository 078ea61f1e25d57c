// GDN_VECTORIZED: a function built for AVX-512, AVX2 and baseline x86-64 and picked at load time
// (GCC target_clones), so its loops vectorise on the host's widest ISA. Every clone computes the
// same partial sums in the same order (reductions keep `kLanes` partial sums, whatever the vector
// width), so a result depends on the host's clone (FMA or not), never on threads or timing.
#pragma once

// ThreadSanitizer's runtime is not yet initialised when GCC's ifunc resolvers run at load time
// (the process crashes), so a TSan build takes the baseline code only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define GDN_VECTORIZED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define GDN_VECTORIZED_CLONES 1  // where a function's clones may also be written out by hand
#else
#define GDN_VECTORIZED
#define GDN_VECTORIZED_CLONES 0
#endif

namespace gdn::cpu {
constexpr int kLanes = 16;  // partial sums of every reduction
}  // namespace gdn::cpu
