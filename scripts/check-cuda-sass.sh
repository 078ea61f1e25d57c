#!/usr/bin/env bash
# Checks the cuda backend's machine code (SASS) for the bf16 tensor-core path of
# GDN_PRECISION_BF16: every chunked kernel (chunk_prepare_kernel, chunk_forward_kernel,
# chunk_backward_kernel) holds bf16 mma instructions (HMMA.16816.F32.BF16) next to the TF32 ones
# of EXACT (HMMA.1684.F32.TF32), for every architecture the build compiled (sm_80 and newer all
# have bf16 mma). Needs cuobjdump (the CUDA toolkit, or: pip install nvidia-cuda-cuobjdump).
#
#   scripts/check-cuda-sass.sh [build-dir]        (default: build-cuda)
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
command -v cuobjdump >/dev/null || { echo "check-cuda-sass: cuobjdump not found" >&2; exit 2; }
OBJECTS=$(find "$BUILD" -path '*gdn_objects.dir/cuda/chunk_*.cu.o' | sort)
[ -n "$OBJECTS" ] || { echo "check-cuda-sass: no chunk_*.cu.o under $BUILD (a build with GDN_CUDA=ON)" >&2; exit 2; }

failed=0
for object in $OBJECTS; do
    # Per (architecture, kernel): bf16 and tf32 HMMA counts. cuobjdump prints "arch = sm_XX"
    # before each architecture's code and "Function : <mangled name>" before each kernel.
    report=$(cuobjdump -sass "$object" | awk '
        /arch = sm_/ { arch = $3 }
        /Function :/ { fn = $3; kernel = "" }
        /Function :/ && fn ~ /chunk_prepare_kernel/ { kernel = "chunk_prepare_kernel" }
        /Function :/ && fn ~ /chunk_forward_kernel/ { kernel = "chunk_forward_kernel" }
        /Function :/ && fn ~ /chunk_backward_kernel/ { kernel = "chunk_backward_kernel" }
        kernel != "" && /HMMA\.16816\.F32\.BF16/ { bf16[arch " " kernel]++ }
        kernel != "" && /HMMA\.1684\.F32\.TF32/ { tf32[arch " " kernel]++ }
        kernel != "" { seen[arch " " kernel] = 1 }
        END { for (k in seen) printf "%s %d %d\n", k, bf16[k] + 0, tf32[k] + 0 }' | sort)
    [ -n "$report" ] || { echo "$object: no chunked kernels found"; failed=1; continue; }
    while read -r arch kernel bf16 tf32; do
        status=ok
        if [ "$bf16" -eq 0 ] || [ "$tf32" -eq 0 ]; then status=MISSING; failed=1; fi
        printf '%-8s %-24s HMMA.BF16 %4d  HMMA.TF32 %4d  %s\n' "$arch" "$kernel" "$bf16" "$tf32" "$status"
    done <<<"$report"
done
exit $failed
