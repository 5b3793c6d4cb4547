// kvpilot KV kernels: RoPE Δ-rotation in place, and row moves (gather ->
// optional rotate -> scatter) between two arenas. Compiled to PTX by
// gen-ptx.sh; the PTX is committed and embedded by the Go package, which
// loads it with cuModuleLoadData.
//
// Memory model (same as kernels.Layout): an arena holds buffers; buffer b is
// an array of token-slot rows of rowBytes bytes at byte offset `offset`. A
// RoPE-carrying buffer has `heads` slices of `dim` elements at
// ropeOffset + h*headStride within a row (ropeOffset < 0: no RoPE).
//
// The arithmetic matches the Go CPU engine bit for bit: cos/sin come from the
// same float64-computed, float32-rounded tables; products and sums use
// __fmul_rn/__fadd_rn/__fsub_rn, which the compiler never contracts into
// FMA; bf16/fp16 conversions are the same integer round-to-nearest-even.

struct BufDesc {
    unsigned long long offset;
    unsigned int rowBytes;
    int ropeOffset;
    unsigned int heads;
    unsigned int headStride;
};

__device__ __forceinline__ float bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned int b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((b >> 16) | 0x40u);
    }
    b += 0x7fffu + ((b >> 16) & 1u);
    return (unsigned short)(b >> 16);
}

__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    unsigned int sign = ((unsigned int)(h & 0x8000u)) << 16;
    unsigned int exp = (h >> 10) & 0x1fu;
    unsigned int man = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp != 0u) return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0u) return __uint_as_float(sign);
    float v = __fmul_rn((float)man, 1.0f / 16777216.0f);  // exact: man * 2^-24
    return sign ? -v : v;
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned int b = __float_as_uint(f);
    unsigned short sign = (unsigned short)((b >> 16) & 0x8000u);
    int exp = (int)((b >> 23) & 0xffu);
    unsigned int man = b & 0x7fffffu;
    if (exp == 0xff) return man ? (unsigned short)(sign | 0x7e00u) : (unsigned short)(sign | 0x7c00u);
    int e = exp - 127 + 15;
    if (e >= 0x1f) return (unsigned short)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return sign;
        unsigned int m = man | 0x800000u;
        unsigned int shift = (unsigned int)(14 - e);
        unsigned int q = m >> shift;
        unsigned int rem = m & ((1u << shift) - 1u);
        unsigned int half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (unsigned short)(sign | q);
    }
    unsigned int q = ((unsigned int)e << 10) | (man >> 13);
    unsigned int rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
    return (unsigned short)(sign | q);
}

// fp8 (kernels/fp8.go): stored x/scale, rotated as stored (a rotation is
// linear), widened exactly and narrowed to nearest even, saturating to the
// largest finite value; a NaN stays a NaN. MAN mantissa bits, exponent bias
// BIAS, largest finite encoding MAXFIN, IEEE: an all-ones exponent is
// infinity or NaN (e5m2), else only S.1111.111 is NaN (e4m3fn).
template <int MAN, int BIAS, unsigned int MAXFIN, bool IEEE>
struct FP8 {
    typedef unsigned char T;
    static __device__ __forceinline__ float load(T b) {
        unsigned int sign = ((unsigned int)(b & 0x80u)) << 24;
        const unsigned int top = (1u << (7 - MAN)) - 1u;
        unsigned int e = ((unsigned int)b >> MAN) & top;
        unsigned int m = (unsigned int)b & ((1u << MAN) - 1u);
        if (IEEE && e == top) return __uint_as_float(sign | (m ? 0x7fc00000u : 0x7f800000u));
        if (!IEEE && e == top && m == (1u << MAN) - 1u) return __uint_as_float(sign | 0x7fc00000u);
        if (e == 0u) {
            // m * 2^(1-BIAS-MAN): exact, a power of two times a small integer.
            float v = __fmul_rn((float)m, __uint_as_float((unsigned int)(127 + 1 - BIAS - MAN) << 23));
            return sign ? -v : v;
        }
        return __uint_as_float(sign | ((e - BIAS + 127u) << 23) | (m << (23 - MAN)));
    }
    static __device__ __forceinline__ T store(float f) {
        unsigned int b = __float_as_uint(f);
        unsigned int sign = (b >> 24) & 0x80u;
        int exp = (int)((b >> 23) & 0xffu);
        unsigned int man = b & 0x7fffffu;
        if (exp == 0xff) return (T)(sign | (man ? 0x7fu : MAXFIN));
        int e = exp - 127 + BIAS;
        if (e <= 0) {
            if (e < -MAN) return (T)sign;
            unsigned int m = man | 0x800000u;
            unsigned int shift = (unsigned int)(24 - MAN - e);
            unsigned int q = m >> shift;
            unsigned int rem = m & ((1u << shift) - 1u);
            unsigned int half = 1u << (shift - 1u);
            if (rem > half || (rem == half && (q & 1u))) q++;
            return (T)(sign | q);
        }
        if (e > (int)(MAXFIN >> MAN)) return (T)(sign | MAXFIN);
        const unsigned int shift = 23 - MAN;
        unsigned int q = ((unsigned int)e << MAN) | (man >> shift);
        unsigned int rem = man & ((1u << shift) - 1u);
        unsigned int half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        if (q > MAXFIN) q = MAXFIN;
        return (T)(sign | q);
    }
};
typedef FP8<3, 7, 0x7eu, false> E4M3;
typedef FP8<2, 15, 0x7bu, true> E5M2;

struct F32 {
    typedef float T;
    static __device__ __forceinline__ float load(T v) { return v; }
    static __device__ __forceinline__ T store(float f) { return f; }
};
struct BF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float load(T v) { return bf16_to_f32(v); }
    static __device__ __forceinline__ T store(float f) { return f32_to_bf16(f); }
};
struct F16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float load(T v) { return f16_to_f32(v); }
    static __device__ __forceinline__ T store(float f) { return f32_to_f16(f); }
};

// Rotating one pair: the same operations, in the same order, as the CPU engine.
template <typename D>
__device__ __forceinline__ void rotate_pair(typename D::T& a, typename D::T& b, float c, float s) {
    float x = D::load(a);
    float y = D::load(b);
    a = D::store(__fsub_rn(__fmul_rn(x, c), __fmul_rn(y, s)));
    b = D::store(__fadd_rn(__fmul_rn(x, s), __fmul_rn(y, c)));
}

// Sixteen bytes of elements, loaded and stored as one access.
template <typename T>
union Vec16 {
    uint4 u;
    T e[16 / sizeof(T)];
};

// rotate_row_slice rotates the RoPE slices of one row. Where every slice is
// 16-byte aligned in its halves (half-split) or as a whole (interleaved),
// each thread rotates 16 bytes of each side per step: a thread that moved
// one 2-byte element per load kept too few bytes in flight for the memory
// (on an H200, 176 GB/s of K rows that way, 251 GB/s this way). Other
// shapes take the element path. Both give the same bits.
template <typename D>
__device__ __forceinline__ void rotate_row_slice(unsigned char* row, const BufDesc& bd, const float* cosT,
                                                 const float* sinT, int dim, int interleaved) {
    typedef typename D::T T;
    const int E = 16 / sizeof(T);  // elements per 16 bytes
    int half = dim >> 1;
    unsigned char* base = row + bd.ropeOffset;
    unsigned long long span = interleaved ? (unsigned long long)dim * sizeof(T) : (unsigned long long)half * sizeof(T);
    if ((((unsigned long long)base | bd.headStride | span) & 15ull) == 0) {
        // Chunks of E elements: half-split pairs element k of the first half
        // with element k of the second; interleaved pairs neighbours.
        int per = interleaved ? dim / E : half / E;  // chunks per head
        int chunks = (int)bd.heads * per;
        for (int q = threadIdx.x; q < chunks; q += blockDim.x) {
            int h = q / per;
            int c = q - h * per;
            T* v = (T*)(base + (unsigned long long)h * bd.headStride);
            if (interleaved) {
                Vec16<T> w;
                w.u = ((const uint4*)v)[c];
                int i0 = c * (E / 2);
#pragma unroll
                for (int k = 0; k < E / 2; k++) rotate_pair<D>(w.e[2 * k], w.e[2 * k + 1], cosT[i0 + k], sinT[i0 + k]);
                ((uint4*)v)[c] = w.u;
            } else {
                Vec16<T> x, y;
                x.u = ((const uint4*)v)[c];
                y.u = ((const uint4*)(v + half))[c];
                int i0 = c * E;
#pragma unroll
                for (int k = 0; k < E; k++) rotate_pair<D>(x.e[k], y.e[k], cosT[i0 + k], sinT[i0 + k]);
                ((uint4*)v)[c] = x.u;
                ((uint4*)(v + half))[c] = y.u;
            }
        }
        return;
    }
    int pairs = (int)bd.heads * half;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        int h = p / half;
        int i = p - h * half;
        T* v = (T*)(base + (unsigned long long)h * bd.headStride);
        int a = interleaved ? 2 * i : i;
        int b = interleaved ? 2 * i + 1 : i + half;
        rotate_pair<D>(v[a], v[b], cosT[i], sinT[i]);
    }
}

// kv_rotate: grid (ceil(n/blockDim.y), nRopeBufs); block (pair threads, slots).
// tabIdx[i] < 0 means Δ = 0: the row is left untouched.
template <typename D>
__device__ void kv_rotate(unsigned char* arena, const BufDesc* bufs, const int* ropeBufs, const int* slots,
                          const int* tabIdx, const float* cosT, const float* sinT, int n, int dim,
                          int interleaved) {
    int i = blockIdx.x * blockDim.y + threadIdx.y;
    if (i >= n) return;
    int t = tabIdx[i];
    if (t < 0) return;
    BufDesc bd = bufs[ropeBufs[blockIdx.y]];
    unsigned char* row = arena + bd.offset + (unsigned long long)slots[i] * bd.rowBytes;
    int half = dim >> 1;
    rotate_row_slice<D>(row, bd, cosT + (size_t)t * half, sinT + (size_t)t * half, dim, interleaved);
}

// kv_move: grid (ceil(n/blockDim.y), nBufs); block (word threads, pairs).
// Copies row srcSlots[i] of buffer b in the source arena to row dstSlots[i]
// of buffer b in the destination arena in words of wordBytes (16, 4 or 2,
// chosen by the host so every row and base is aligned to it; 1 for an odd
// fp8 row), then, when
// tabIdx is non-null and the destination buffer carries RoPE, rotates the
// copy. Source and destination rows never alias within one launch (the host
// stages overlapping moves through a temporary arena).
template <typename D>
__device__ void kv_move(unsigned char* dstBase, const BufDesc* dstBufs, const unsigned char* srcBase,
                        const BufDesc* srcBufs, const int* dstSlots, const int* srcSlots, const int* tabIdx,
                        const float* cosT, const float* sinT, int n, int dim, int interleaved, int wordBytes) {
    int i = blockIdx.x * blockDim.y + threadIdx.y;
    bool live = i < n;
    BufDesc db = dstBufs[blockIdx.y];
    BufDesc sb = srcBufs[blockIdx.y];
    unsigned char* out = 0;
    if (live) {
        out = dstBase + db.offset + (unsigned long long)dstSlots[i] * db.rowBytes;
        const unsigned char* in = srcBase + sb.offset + (unsigned long long)srcSlots[i] * sb.rowBytes;
        if (wordBytes == 16) {
            for (unsigned int w = threadIdx.x; w < db.rowBytes / 16; w += blockDim.x)
                ((uint4*)out)[w] = ((const uint4*)in)[w];
        } else if (wordBytes == 4) {
            for (unsigned int w = threadIdx.x; w < db.rowBytes / 4; w += blockDim.x)
                ((unsigned int*)out)[w] = ((const unsigned int*)in)[w];
        } else if (wordBytes == 2) {
            for (unsigned int w = threadIdx.x; w < db.rowBytes / 2; w += blockDim.x)
                ((unsigned short*)out)[w] = ((const unsigned short*)in)[w];
        } else {
            for (unsigned int w = threadIdx.x; w < db.rowBytes; w += blockDim.x) out[w] = in[w];
        }
    }
    if (tabIdx == 0 || db.ropeOffset < 0) return;  // uniform across the block
    // The slice is rotated in place by threads that did not necessarily copy
    // it: make the block's copies visible first. Every thread reaches here.
    __syncthreads();
    if (!live) return;
    int t = tabIdx[i];
    if (t < 0) return;
    int half = dim >> 1;
    rotate_row_slice<D>(out, db, cosT + (size_t)t * half, sinT + (size_t)t * half, dim, interleaved);
}

#define KV_ENTRY(NAME, D)                                                                                    \
    extern "C" __global__ void kv_rotate_##NAME(unsigned char* arena, const BufDesc* bufs, const int* ropeBufs, \
                                                const int* slots, const int* tabIdx, const float* cosT,       \
                                                const float* sinT, int n, int dim, int interleaved) {         \
        kv_rotate<D>(arena, bufs, ropeBufs, slots, tabIdx, cosT, sinT, n, dim, interleaved);                  \
    }                                                                                                         \
    extern "C" __global__ void kv_move_##NAME(unsigned char* dstBase, const BufDesc* dstBufs,                  \
                                              const unsigned char* srcBase, const BufDesc* srcBufs,           \
                                              const int* dstSlots, const int* srcSlots, const int* tabIdx,    \
                                              const float* cosT, const float* sinT, int n, int dim,           \
                                              int interleaved, int wordBytes) {                               \
        kv_move<D>(dstBase, dstBufs, srcBase, srcBufs, dstSlots, srcSlots, tabIdx, cosT, sinT, n, dim,        \
                   interleaved, wordBytes);                                                                   \
    }

KV_ENTRY(f32, F32)
KV_ENTRY(bf16, BF16)
KV_ENTRY(f16, F16)
KV_ENTRY(e4m3, E4M3)
KV_ENTRY(e5m2, E5M2)
