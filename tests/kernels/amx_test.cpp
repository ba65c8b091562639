// The AMX tiles (src/kernels/amx_*.cpp) at the sizes prefill gives them: many rows and
// tokens, rows of many blocks, strides larger than a row, code extremes and non-finite
// scales. Every output must be bitwise the scalar vec_dot. Skipped, naming the missing
// feature, on a CPU without AMX.
#include "kernel_test_util.h"

#include "kernels/blocks.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

// Own namespace: the test sources are compiled as one unity file.
namespace skippy::kernels::amx_tiles_test {
namespace {

using testing::random_row;

#define SKIP_WITHOUT_AMX()                                                                           \
    do {                                                                                             \
        if (!cpu_supports(implementation::amx)) {                                                    \
            GTEST_SKIP() << "amx path: this CPU lacks " << missing_cpu_features(implementation::amx); \
        }                                                                                            \
    } while (0)

const type_kernels & scalar_of(tensor_type t) { return *kernel_table(implementation::scalar, t); }
const type_kernels & amx_of(tensor_type t) { return *kernel_table(implementation::amx, t); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The types with AMX tiles.
const tensor_type k_amx_types[] = {tensor_type::q8_0, tensor_type::q4_0, tensor_type::q4_k, tensor_type::q5_k,
                                   tensor_type::q6_k};

// n_rows rows encoded by the scalar weight encoder, each at a stride of `stride` bytes
// (>= the row's bytes; the gap is filled with 0xa5), after `lead` bytes of offset.
std::vector<uint8_t> weight_rows(tensor_type t, int64_t n_rows, int64_t n, size_t stride, size_t lead, uint64_t seed) {
    std::vector<uint8_t> out(lead + stride * static_cast<size_t>(n_rows), 0xa5);
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto v = random_row(n, seed * 7919 + static_cast<uint64_t>(r), 0.05f);
        scalar_of(t).from_float(v.data(), out.data() + lead + stride * static_cast<size_t>(r), n);
    }
    return out;
}

std::vector<uint8_t> activation_rows(tensor_type at, int64_t n_tokens, int64_t n, size_t stride, uint64_t seed) {
    std::vector<uint8_t> out(stride * static_cast<size_t>(n_tokens), 0x5a);
    for (int64_t i = 0; i < n_tokens; ++i) {
        const auto v = random_row(n, seed * 104729 + static_cast<uint64_t>(i));
        scalar_of(at).from_float_activation(v.data(), out.data() + stride * static_cast<size_t>(i), n);
    }
    return out;
}

// Runs the AMX mul_tile on the given rows and checks every output against the scalar
// vec_dot, and that nothing outside the tile was written.
void expect_tile_equals_reference(tensor_type t, const uint8_t * w, size_t w_stride, int64_t n_rows, const uint8_t * x,
                                  size_t x_stride, int64_t n_tokens, int64_t n, const std::string & what) {
    const type_kernels & k = amx_of(t);
    const int64_t y_stride = n_rows + 5;
    std::vector<float> y(static_cast<size_t>(n_tokens * y_stride), -1.0f);
    k.mul_tile(w, w_stride, n_rows, x, x_stride, n_tokens, n, y.data(), y_stride);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (int64_t r = 0; r < n_rows; ++r) {
            const float expected = scalar_of(t).vec_dot(w + r * w_stride, x + tok * x_stride, n);
            ASSERT_TRUE(same_bits(y[tok * y_stride + r], expected))
                << what << ": " << testing::type_param_name(t) << " " << n_rows << "x" << n_tokens << " row " << r
                << " token " << tok << ": " << y[tok * y_stride + r] << " vs " << expected;
        }
        for (int64_t r = n_rows; r < y_stride; ++r) ASSERT_EQ(y[tok * y_stride + r], -1.0f) << what << ": wrote outside the tile";
    }
}

class amx_per_type : public ::testing::TestWithParam<tensor_type> {};

TEST_P(amx_per_type, TheTypeHasAnAmxTile) {
    SKIP_WITHOUT_AMX();
    const tensor_type t = GetParam();
    ASSERT_NE(amx_of(t).mul_tile, nullptr);
    EXPECT_NE(amx_of(t).mul_tile, kernel_table(implementation::avx512, t)->mul_tile)
        << testing::type_param_name(t) << " still runs the AVX-512 entry";
}

// Tiles of many rows and tokens (full and partial token tiles, rows beyond the last
// group of 16), rows of many blocks, strides larger than a row and unaligned bases.
TEST_P(amx_per_type, LargeTilesEqualVecDotBitwise) {
    SKIP_WITHOUT_AMX();
    const tensor_type t = GetParam();
    const tensor_type at = scalar_of(t).vec_dot_type;
    const int64_t block = testing::block_elems_of(t);
    const int64_t n = block == 32 ? 41 * 32 : 9 * 256;
    const size_t w_stride = row_bytes(t, n) + 7, x_stride = row_bytes(at, n) + 13;
    const int64_t max_rows = 160, max_tokens = 100;
    const auto w = weight_rows(t, max_rows, n, w_stride, 3, 11);
    const auto x = activation_rows(at, max_tokens, n, x_stride, 12);
    struct shape {
        int64_t rows, tokens;
    };
    for (const shape s : {shape{64, 16}, shape{160, 100}, shape{64, 17}, shape{80, 31}, shape{71, 48}, shape{150, 33},
                          shape{16, 64}, shape{33, 99}, shape{64, 8}, shape{40, 8}, shape{16, 8},
                          shape{64, 4}, shape{33, 5}, shape{48, 7}}) {
        expect_tile_equals_reference(t, w.data() + 3, w_stride, s.rows, x.data(), x_stride, s.tokens, n,
                                     "random " + std::to_string(s.rows) + "x" + std::to_string(s.tokens));
    }
}

// Weight bytes at the extremes (every bit set, none set, random) with finite scale
// fields, against activations whose codes are all +127 or all -127: the largest products
// the split B planes (lo and hi bytes of value * scale) must carry.
struct weight_fields {
    size_t              block_bytes;
    std::vector<size_t> f16_fields;  // d first
};

weight_fields fields_of(tensor_type t) {
    switch (t) {
        case tensor_type::q8_0: return {q8_0_block_bytes, {0}};
        case tensor_type::q4_0: return {q4_0_block_bytes, {0}};
        case tensor_type::q4_k: return {q4_k_block_bytes, {q4_k_off_d, q4_k_off_dmin}};
        case tensor_type::q5_k: return {q5_k_block_bytes, {q5_k_off_d, q5_k_off_dmin}};
        case tensor_type::q6_k: return {q6_k_block_bytes, {q6_k_off_d}};
        default: return {0, {}};
    }
}

void fill_activations(tensor_type at, int64_t n, int8_t code, float d, uint8_t * out) {
    if (at == tensor_type::q8_k) {
        for (int64_t b = 0; b < n / qk_k; ++b) {
            uint8_t * blk = out + b * q8_k_block_bytes;
            std::memcpy(blk + q8_k_off_d, &d, 4);
            std::memset(blk + q8_k_off_qs, static_cast<uint8_t>(code), qk_k);
            for (int j = 0; j < qk_k / 16; ++j) store_u16_le(blk + q8_k_off_bsums + 2 * j, static_cast<uint16_t>(16 * code));
        }
    } else {
        for (int64_t b = 0; b < n / qk_0; ++b) {
            uint8_t * blk = out + b * q8_0_block_bytes;
            store_u16_le(blk, f32_to_f16(d));
            std::memset(blk + 2, static_cast<uint8_t>(code), qk_0);
        }
    }
}

std::vector<uint8_t> pattern_rows(tensor_type t, int64_t n_rows, int64_t n, int pattern, f16_bits d, f16_bits dmin) {
    const weight_fields f = fields_of(t);
    const size_t w_row = row_bytes(t, n);
    std::vector<uint8_t> w(w_row * static_cast<size_t>(n_rows));
    uint64_t s = 12345 + static_cast<uint64_t>(pattern);
    for (auto & byte : w) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        byte = pattern == 0 ? 0xff : pattern == 1 ? 0x00 : static_cast<uint8_t>(s >> 56);
    }
    for (size_t b = 0; b < w.size() / f.block_bytes; ++b) {
        for (size_t i = 0; i < f.f16_fields.size(); ++i) store_u16_le(w.data() + b * f.block_bytes + f.f16_fields[i], i == 0 ? d : dmin);
    }
    return w;
}

TEST_P(amx_per_type, ExtremeCodesEqualVecDotBitwise) {
    SKIP_WITHOUT_AMX();
    const tensor_type t = GetParam();
    const tensor_type at = scalar_of(t).vec_dot_type;
    const int64_t n = testing::block_elems_of(t) == 32 ? 8 * 32 : 3 * 256;
    const int64_t n_rows = 48;
    const size_t x_row = row_bytes(at, n);
    // 35 tokens: full and partial tiles; 8 and 4: the one short tile of a batched decode step.
    for (const int64_t n_tokens : {int64_t{35}, int64_t{8}, int64_t{4}}) {
        for (int pattern = 0; pattern < 3; ++pattern) {
            const auto w = pattern_rows(t, n_rows, n, pattern, f32_to_f16(0.5f), f32_to_f16(0.25f));
            for (int8_t code : {int8_t{127}, int8_t{-127}}) {
                std::vector<uint8_t> x(x_row * n_tokens);
                for (int64_t i = 0; i < n_tokens; ++i) fill_activations(at, n, code, 0.75f, x.data() + i * x_row);
                expect_tile_equals_reference(t, w.data(), row_bytes(t, n), n_rows, x.data(), x_row, n_tokens, n,
                                             "pattern " + std::to_string(pattern) + " code " + std::to_string(int(code)));
            }
            // Random codes in both directions, mixed signs per token.
            const auto x = activation_rows(at, n_tokens, n, x_row, 40 + static_cast<uint64_t>(pattern));
            expect_tile_equals_reference(t, w.data(), row_bytes(t, n), n_rows, x.data(), x_row, n_tokens, n,
                                         "pattern " + std::to_string(pattern) + " random activations");
        }
    }
}

// Infinite and NaN scales (weights or activations) make the reference produce inf and
// NaN; the tiles must give the same bits.
TEST_P(amx_per_type, NonFiniteScalesGiveTheReferenceBits) {
    SKIP_WITHOUT_AMX();
    const tensor_type t = GetParam();
    const tensor_type at = scalar_of(t).vec_dot_type;
    const int64_t n = testing::block_elems_of(t) == 32 ? 6 * 32 : 2 * 256;
    const int64_t n_rows = 32, n_tokens = 20;
    const size_t w_row = row_bytes(t, n), x_row = row_bytes(at, n);
    const f16_bits inf16 = 0x7c00, nan16 = 0x7e00;
    const weight_fields f = fields_of(t);
    // Random weights; one row with an infinite d in its second block, one with NaN.
    auto w = weight_rows(t, n_rows, n, w_row, 0, 21);
    store_u16_le(w.data() + 3 * w_row + f.block_bytes + f.f16_fields[0], inf16);
    store_u16_le(w.data() + 17 * w_row + f.f16_fields[0], nan16);
    if (f.f16_fields.size() > 1) store_u16_le(w.data() + 20 * w_row + f.f16_fields[1], inf16);
    auto x = activation_rows(at, n_tokens, n, x_row, 22);
    // A token with an infinite scale (inf * 0 sums give NaN, others inf).
    if (at == tensor_type::q8_k) {
        const float inf = INFINITY;
        std::memcpy(x.data() + 5 * x_row + q8_k_off_d, &inf, 4);
    } else {
        store_u16_le(x.data() + 5 * x_row, inf16);
    }
    // The reference does produce infinities and NaNs here.
    const auto reference = [&](const std::vector<uint8_t> & ws, int64_t r, int64_t tok) {
        return scalar_of(t).vec_dot(ws.data() + r * w_row, x.data() + tok * x_row, n);
    };
    ASSERT_TRUE(std::isinf(reference(w, 3, 0)) || std::isnan(reference(w, 3, 0)));
    ASSERT_TRUE(std::isnan(reference(w, 17, 0)));
    ASSERT_FALSE(std::isfinite(reference(w, 0, 5)));
    expect_tile_equals_reference(t, w.data(), w_row, n_rows, x.data(), x_row, n_tokens, n, "non-finite scales");
    // Every weight scale infinite, against zero and nonzero activation codes.
    auto w_inf = pattern_rows(t, n_rows, n, 2, inf16, inf16);
    ASSERT_FALSE(std::isfinite(reference(w_inf, 1, 1)));
    expect_tile_equals_reference(t, w_inf.data(), w_row, n_rows, x.data(), x_row, n_tokens, n, "infinite weight scales");
}

// The whole product through matmul on the AMX path, 1 to 3 threads, against the scalar
// reference (scalar activation encoder, scalar vec_dot).
TEST_P(amx_per_type, MatmulOnTheAmxPathEqualsTheScalarReference) {
    SKIP_WITHOUT_AMX();
    const tensor_type t = GetParam();
    const tensor_type at = scalar_of(t).vec_dot_type;
    const int64_t n = testing::block_elems_of(t) == 32 ? 24 * 32 : 3 * 256;
    const int64_t n_rows = 100, n_tokens = 70;
    const size_t w_row = row_bytes(t, n), x_row = row_bytes(at, n);
    const auto w = weight_rows(t, n_rows, n, w_row, 0, 31);
    std::vector<float> x;
    for (int64_t i = 0; i < n_tokens; ++i) {
        const auto row = random_row(n, 32 + static_cast<uint64_t>(i));
        x.insert(x.end(), row.begin(), row.end());
    }
    std::vector<uint8_t> xq(x_row * n_tokens);
    for (int64_t i = 0; i < n_tokens; ++i) scalar_of(at).from_float_activation(x.data() + i * n, xq.data() + i * x_row, n);
    struct scoped_amx {
        implementation previous = active_impl();
        scoped_amx() { set_active_impl(implementation::amx); }
        ~scoped_amx() { set_active_impl(previous); }
    } path;
    for (int n_threads : {1, 2, 3}) {
        thread_pool pool(n_threads);
        for (int64_t tokens : {int64_t(1), int64_t(16), int64_t(33), n_tokens}) {
            std::vector<float> y(static_cast<size_t>(tokens * n_rows));
            matmul(matrix_view{t, w.data(), n, n_rows}, x.data(), tokens, y.data(), &pool);
            for (int64_t i = 0; i < tokens; ++i) {
                for (int64_t r = 0; r < n_rows; ++r) {
                    const float reference = scalar_of(t).vec_dot(w.data() + r * w_row, xq.data() + i * x_row, n);
                    ASSERT_TRUE(same_bits(y[i * n_rows + r], reference))
                        << "threads " << n_threads << " tokens " << tokens << " row " << r << " token " << i;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, amx_per_type, ::testing::ValuesIn(k_amx_types),
                         [](const auto & p) { return testing::type_param_name(p.param); });

}  // namespace
}  // namespace skippy::kernels::amx_tiles_test
