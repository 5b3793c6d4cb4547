#!/bin/sh
# Regenerates the committed PTX from kernels/cuda/*.cu (make ptx).
# Needs nvcc (Debian: nvidia-cuda-toolkit, contrib non-free). The PTX targets
# compute_80 so the driver can JIT it for A100/L40S (sm_80/89) as well as
# H100/H200 (sm_90); check-ptx.sh assembles it for sm_90.
set -eu
cd "$(dirname "$0")"
for cu in *.cu; do
	ptx="${cu%.cu}.ptx"
	nvcc -ptx -arch=compute_80 -O3 -std=c++14 -o "$ptx.tmp" "$cu"
	# Drop the compiler's build-specific header comments so regeneration is
	# reproducible across toolkit patch levels.
	grep -v '^//' "$ptx.tmp" >"$ptx"
	rm -f "$ptx.tmp"
	echo "generated kernels/cuda/$ptx"
done
