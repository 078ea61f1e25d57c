#!/usr/bin/env bash
# Checks the cuda backend's machine code (SASS) for the two precisions of the chunked kernels
# (chunk_prepare_kernel, chunk_forward_kernel, chunk_backward_kernel; template<bool
# kBf16Products>): for every architecture the build compiled (sm_80 and newer all have bf16
# mma), the GDN_PRECISION_BF16 instantiation (<true>) holds bf16 mma instructions
# (HMMA.16816.F32.BF16) and no TF32 ones, the EXACT instantiation (<false>) TF32 ones
# (HMMA.1684.F32.TF32, the 3xTF32 products) and no bf16 ones. Needs cuobjdump (the CUDA
# toolkit, or: pip install nvidia-cuda-cuobjdump; $CUOBJDUMP names it if it is not on the PATH).
# ctest runs this as cuda_sass_bf16 where the configure step found cuobjdump.
#
#   scripts/check-cuda-sass.sh [build-dir]        (default: build-cuda)
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
command -v "$CUOBJDUMP" >/dev/null || { echo "check-cuda-sass: cuobjdump not found" >&2; exit 2; }
OBJECTS=$(find "$BUILD" -path '*gdn_objects.dir/cuda/chunk_*.cu.o' | sort)
[ -n "$OBJECTS" ] || { echo "check-cuda-sass: no chunk_*.cu.o under $BUILD (a build with GDN_CUDA=ON)" >&2; exit 2; }

failed=0
for object in $OBJECTS; do
    # Per (architecture, kernel): bf16 and tf32 HMMA counts. cuobjdump prints "arch = sm_XX"
    # before each architecture's code and "Function : <mangled name>" before each kernel.
    echo "$object"
    report=$("$CUOBJDUMP" -sass "$object" | awk '
        /arch = sm_/ { arch = $3 }
        /Function :/ {
            fn = $3; kernel = ""
            if (fn ~ /chunk_prepare_kernel/) kernel = "chunk_prepare_kernel"
            if (fn ~ /chunk_forward_kernel/) kernel = "chunk_forward_kernel"
            if (fn ~ /chunk_backward_kernel/) kernel = "chunk_backward_kernel"
            if (kernel != "") { base[arch " " kernel] = 1; kernel = kernel (fn ~ /ILb1E/ ? "<bf16>" : "<exact>") }
        }
        kernel != "" && /HMMA\.16816\.F32\.BF16/ { bf16[arch " " kernel]++ }
        kernel != "" && /HMMA\.1684\.F32\.TF32/ { tf32[arch " " kernel]++ }
        kernel != "" { seen[arch " " kernel] = 1 }
        END {  # both instantiations of every kernel found, a missing one with count -1
            for (b in base) for (v = 0; v < 2; ++v) {
                k = b (v ? "<bf16>" : "<exact>")
                printf "%s %d %d\n", k, k in seen ? bf16[k] + 0 : -1, k in seen ? tf32[k] + 0 : -1
            }
        }' | sort)
    [ -n "$report" ] || { echo "$object: no chunked kernels found"; failed=1; continue; }
    while read -r arch kernel bf16 tf32; do
        status=ok
        case "$kernel" in
            *"<bf16>") { [ "$bf16" -gt 0 ] && [ "$tf32" -eq 0 ]; } || status=WRONG ;;
            *) { [ "$tf32" -gt 0 ] && [ "$bf16" -eq 0 ]; } || status=WRONG ;;
        esac
        [ "$status" = ok ] || failed=1
        printf '%-8s %-30s HMMA.BF16 %4d  HMMA.TF32 %4d  %s\n' "$arch" "$kernel" "$bf16" "$tf32" "$status"
    done <<<"$report"
done
exit $failed
