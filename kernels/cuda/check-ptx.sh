#!/bin/sh
# Validates the committed PTX by assembling it for sm_90 (make ptx-check).
set -eu
cd "$(dirname "$0")"
for ptx in *.ptx; do
	ptxas -arch=sm_90 -o /dev/null "$ptx"
	echo "ok kernels/cuda/$ptx (sm_90)"
done
