// The fast kernel paths (AVX2, AVX-512, AMX) against the scalar reference: activation
// encoders write the same bytes, products give the same bits (every path reproduces the
// reference's operation order, see src/kernels/avx2_util.h), and a tile of any shape
// gives every output bitwise the scalar vec_dot (batch invariance between
// matrix-vector and matrix-matrix products, and across paths). A path the CPU lacks is
// skipped with a message naming the missing feature.
#include "kernel_test_util.h"

#include "kernels/avx512_kernels.h"
#include "kernels/blocks.h"
#include "kernels/quants_avx2.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace skippy::kernels {
namespace {

using testing::random_row;

const type_kernels & scalar_of(tensor_type t) { return *kernel_table(implementation::scalar, t); }
const type_kernels & avx2_of(tensor_type t) { return *kernel_table(implementation::avx2, t); }
const type_kernels & path_of(implementation impl, tensor_type t) { return *kernel_table(impl, t); }

constexpr implementation k_fast_paths[] = {implementation::avx2, implementation::avx512, implementation::amx};

// Makes impl the active path for a scope (matmul dispatches through the active table).
class scoped_path {
public:
    explicit scoped_path(implementation impl) : previous_(active_impl()) { set_active_impl(impl); }
    ~scoped_path() { set_active_impl(previous_); }
    scoped_path(const scoped_path &) = delete;
    scoped_path & operator=(const scoped_path &) = delete;

private:
    implementation previous_;
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

#define SKIP_WITHOUT(impl)                                                                                   \
    do {                                                                                                     \
        if (!cpu_supports(impl)) {                                                                           \
            GTEST_SKIP() << implementation_name(impl) << " path: this CPU lacks " << missing_cpu_features(impl); \
        }                                                                                                    \
    } while (0)
#define SKIP_WITHOUT_AVX2() SKIP_WITHOUT(implementation::avx2)

// Weights written by the (scalar) weight encoder.
std::vector<uint8_t> weight_rows(tensor_type t, int64_t n_rows, int64_t n, uint64_t seed) {
    std::vector<uint8_t> out;
    std::vector<uint8_t> row(row_bytes(t, n));
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto v = random_row(n, seed * 7919 + r, 0.05f);
        scalar_of(t).from_float(v.data(), row.data(), n);
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

// Activation rows in the weight type's vec_dot_type, by the scalar activation encoder.
std::vector<uint8_t> activation_rows(tensor_type t, int64_t n_tokens, int64_t n, uint64_t seed) {
    const tensor_type at = scalar_of(t).vec_dot_type;
    std::vector<uint8_t> out;
    std::vector<uint8_t> row(row_bytes(at, n));
    for (int64_t i = 0; i < n_tokens; ++i) {
        const auto v = random_row(n, seed * 104729 + i);
        scalar_of(at).from_float_activation(v.data(), row.data(), n);
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

// Sizes with tails: for the plain types any n; for block types 1, 2, 3 and 7 blocks.
std::vector<int64_t> odd_sizes(tensor_type t) {
    const int64_t block = testing::block_elems_of(t);
    if (block == 1) return {1, 3, 7, 8, 9, 15, 16, 17, 100, 257, 1000};
    return {block, 2 * block, 3 * block, 7 * block};
}

// Runs the tile k.mul_tile on the first n_rows rows of w and n_tokens rows of x (n
// values each; y_stride = n_rows + 3) and checks that every output has the scalar
// vec_dot's bits and that nothing outside the tile was written. A failure names `what`.
void check_tile(tensor_type t, const type_kernels & k, const std::vector<uint8_t> & w, const std::vector<uint8_t> & x, int64_t n,
                int64_t n_rows, int64_t n_tokens, const std::string & what) {
    const size_t w_row = row_bytes(t, n), x_row = row_bytes(k.vec_dot_type, n);
    const int64_t y_stride = n_rows + 3;
    std::vector<float> y(static_cast<size_t>(n_tokens * y_stride), -1.0f);
    k.mul_tile(w.data(), w_row, n_rows, x.data(), x_row, n_tokens, n, y.data(), y_stride);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (int64_t r = 0; r < n_rows; ++r) {
            const float expected = scalar_of(t).vec_dot(w.data() + r * w_row, x.data() + tok * x_row, n);
            ASSERT_TRUE(same_bits(y[tok * y_stride + r], expected)) << what << ": row " << r << " token " << tok;
        }
        for (int64_t r = n_rows; r < y_stride; ++r) ASSERT_EQ(y[tok * y_stride + r], -1.0f) << what << ": wrote outside the tile";
    }
}

// (path, weight type)
class path_per_type : public ::testing::TestWithParam<std::tuple<implementation, tensor_type>> {
protected:
    implementation impl() const { return std::get<0>(GetParam()); }
    tensor_type type() const { return std::get<1>(GetParam()); }
    const type_kernels & fast() const { return path_of(impl(), type()); }
};

TEST_P(path_per_type, VecDotEqualsTheScalarReferenceBitwise) {
    SKIP_WITHOUT(impl());
    const tensor_type t = type();
    for (int64_t n : odd_sizes(t)) {
        for (uint64_t seed = 0; seed < 8; ++seed) {
            const auto w = weight_rows(t, 1, n, 10 + seed);
            const auto x = activation_rows(t, 1, n, 20 + seed);
            const float reference = scalar_of(t).vec_dot(w.data(), x.data(), n);
            const float fast_value = fast().vec_dot(w.data(), x.data(), n);
            ASSERT_TRUE(same_bits(reference, fast_value)) << "n " << n << " seed " << seed << ": " << reference << " vs " << fast_value;
        }
    }
}

// Every tile shape (row and token tails around the 8- and 16-lane and the register and
// AMX tile widths), with strides larger than a row, gives each output exactly the
// scalar vec_dot's bits.
TEST_P(path_per_type, MulTileOfAnyShapeEqualsVecDotBitwise) {
    SKIP_WITHOUT(impl());
    const tensor_type t = type();
    const type_kernels & k = fast();
    ASSERT_NE(k.mul_tile, nullptr);
    const int64_t n = testing::block_elems_of(t) == 1 ? 45 : 3 * testing::block_elems_of(t);
    const int64_t max_rows = 33, max_tokens = 49;
    const auto w = weight_rows(t, max_rows, n, 3);
    const auto x = activation_rows(t, max_tokens, n, 4);
    for (int64_t n_rows : {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 19, 32, 33}) {
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 18, 22, 23, 24, 31, 32, 33, 49}) {
            check_tile(t, k, w, x, n, n_rows, n_tokens, std::to_string(n_rows) + "x" + std::to_string(n_tokens) + " tile");
            if (HasFatalFailure()) return;
        }
    }
}

// Decode's tiles (1 to 3 tokens, and batched decode steps of up to 8, which the
// AVX-512 path takes as one group on each 16 rows, or for some formats
// from 7 tokens as paired rows (run_pairs) where a row is at most one chunk of blocks
// (4 super-blocks; 5 and 9 are past it); 9 tokens is a prefill group again; rows 16 at
// a time and 32-value blocks in pairs): every block count from 1 (a lone block,
// an odd last one) up, groups of 16 rows with and without rows past them, each output
// exactly the scalar vec_dot's bits and nothing written outside the tile.
TEST_P(path_per_type, DecodeTilesOfEveryBlockCountEqualVecDotBitwise) {
    SKIP_WITHOUT(impl());
    const tensor_type t = type();
    const type_kernels & k = fast();
    const int64_t block = testing::block_elems_of(t) == 1 ? 16 : testing::block_elems_of(t);
    for (int64_t n_blocks : {1, 2, 3, 4, 5, 9}) {
        const int64_t n = n_blocks * block;
        const int64_t max_rows = 48, max_tokens = 9;
        const auto w = weight_rows(t, max_rows, n, 60 + n_blocks);
        const auto x = activation_rows(t, max_tokens, n, 70 + n_blocks);
        for (int64_t n_rows : {15, 16, 17, 31, 32, 48}) {
            for (int64_t n_tokens = 1; n_tokens <= max_tokens; ++n_tokens) {
                check_tile(t, k, w, x, n, n_rows, n_tokens,
                           std::to_string(n_blocks) + " blocks, " + std::to_string(n_rows) + " rows, " + std::to_string(n_tokens) + " tokens");
                if (HasFatalFailure()) return;
            }
        }
    }
}

// Rows long enough that the tile processes them in several chunks of blocks.
TEST_P(path_per_type, MulTileOfLongRowsEqualsVecDotBitwise) {
    SKIP_WITHOUT(impl());
    const tensor_type t = type();
    const type_kernels & k = fast();
    const int64_t block = testing::block_elems_of(t);
    const int64_t n = block == 1 ? 4099 : (block == 32 ? 300 * 32 : 70 * 256);
    const int64_t n_rows = 19, n_tokens = 35;
    const auto w = weight_rows(t, n_rows, n, 5);
    const auto x = activation_rows(t, n_tokens, n, 6);
    const size_t w_row = row_bytes(t, n), x_row = row_bytes(k.vec_dot_type, n);
    std::vector<float> y(static_cast<size_t>(n_tokens * n_rows));
    k.mul_tile(w.data(), w_row, n_rows, x.data(), x_row, n_tokens, n, y.data(), n_rows);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (int64_t r = 0; r < n_rows; ++r) {
            const float fast = k.vec_dot(w.data() + r * w_row, x.data() + tok * x_row, n);
            const float reference = scalar_of(t).vec_dot(w.data() + r * w_row, x.data() + tok * x_row, n);
            ASSERT_TRUE(same_bits(y[tok * n_rows + r], fast)) << "row " << r << " token " << tok;
            ASSERT_TRUE(same_bits(fast, reference)) << "row " << r << " token " << tok;
        }
    }
}

TEST_P(path_per_type, DequantizationEqualsTheScalarReferenceBitwise) {
    SKIP_WITHOUT(impl());
    const tensor_type t = type();
    for (int64_t n : odd_sizes(t)) {
        const auto w = weight_rows(t, 1, n, 30);
        std::vector<float> reference(static_cast<size_t>(n)), decoded(static_cast<size_t>(n), -1.0f);
        scalar_of(t).to_float(w.data(), reference.data(), n);
        fast().to_float(w.data(), decoded.data(), n);
        ASSERT_EQ(std::memcmp(reference.data(), decoded.data(), decoded.size() * sizeof(float)), 0) << "n " << n;
    }
}

// The whole product as the model calls it (matmul on this path, any thread count, rows
// and tokens with tails) against the scalar reference: the scalar activation encoder
// and the scalar vec_dot of each row and token.
TEST_P(path_per_type, MatmulEqualsTheScalarReferenceBitwise) {
    SKIP_WITHOUT(impl());
    const scoped_path path(impl());
    const tensor_type t = type();
    const tensor_type at = scalar_of(t).vec_dot_type;
    const int64_t n = testing::block_elems_of(t) == 1 ? 67 : 3 * testing::block_elems_of(t);
    const int64_t n_rows = 53, n_tokens = 37;
    const auto w = weight_rows(t, n_rows, n, 40);
    std::vector<float> x;
    for (int64_t i = 0; i < n_tokens; ++i) {
        const auto row = random_row(n, 50 + i);
        x.insert(x.end(), row.begin(), row.end());
    }
    const size_t w_row = row_bytes(t, n), x_row = row_bytes(at, n);
    std::vector<uint8_t> xq(x_row * n_tokens);
    for (int64_t i = 0; i < n_tokens; ++i) {
        if (at == tensor_type::f32) {
            std::memcpy(xq.data() + i * x_row, x.data() + i * n, x_row);
        } else {
            scalar_of(at).from_float_activation(x.data() + i * n, xq.data() + i * x_row, n);
        }
    }
    for (int n_threads : {1, 2, 3, 4}) {
        thread_pool pool(n_threads);
        for (int64_t tokens : {int64_t(1), int64_t(8), int64_t(16), n_tokens}) {
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

INSTANTIATE_TEST_SUITE_P(kernels, path_per_type,
                         ::testing::Combine(::testing::ValuesIn(k_fast_paths), ::testing::ValuesIn(testing::weight_types())),
                         [](const auto & p) {
                             return std::string(implementation_name(std::get<0>(p.param))) + "_" +
                                    testing::type_param_name(std::get<1>(p.param));
                         });

// Weight bytes at the code extremes (every bit set, none set, random) against
// activations whose codes are all +127 or all -127: the largest integer sums the
// kernels' 16-bit intermediates must hold (Q4_0/Q5_0 tree sums, Q3_K/Q6_K biases from
// the bsums, Q2_K mins). Scale fields are set to finite values so the products are
// numbers; decode tiles and vec_dot must still equal the scalar reference bitwise.
void fill_extreme_activations(tensor_type at, int64_t n, int8_t code, std::vector<uint8_t> & out) {
    out.assign(row_bytes(at, n), 0);
    if (at == tensor_type::q8_k) {
        for (int64_t b = 0; b < n / qk_k; ++b) {
            uint8_t * blk = out.data() + b * q8_k_block_bytes;
            const float d = 0.75f;
            std::memcpy(blk + q8_k_off_d, &d, 4);
            std::memset(blk + q8_k_off_qs, static_cast<uint8_t>(code), qk_k);
            for (int j = 0; j < qk_k / 16; ++j) {
                const int16_t bsum = static_cast<int16_t>(16 * code);
                std::memcpy(blk + q8_k_off_bsums + 2 * j, &bsum, 2);
            }
        }
    } else if (at == tensor_type::q8_1) {
        for (int64_t b = 0; b < n / qk_0; ++b) {
            uint8_t * blk = out.data() + b * q8_1_block_bytes;
            store_u16_le(blk + q8_1_off_d, f32_to_f16(0.75f));
            store_u16_le(blk + q8_1_off_s, f32_to_f16(0.75f * static_cast<float>(qk_0 * code)));
            std::memset(blk + q8_1_off_qs, static_cast<uint8_t>(code), qk_0);
        }
    } else {
        ASSERT_EQ(at, tensor_type::q8_0);
        for (int64_t b = 0; b < n / qk_0; ++b) {
            uint8_t * blk = out.data() + b * q8_0_block_bytes;
            store_u16_le(blk, f32_to_f16(0.75f));
            std::memset(blk + 2, static_cast<uint8_t>(code), qk_0);
        }
    }
}

class path_only : public ::testing::TestWithParam<implementation> {};

TEST_P(path_only, ExtremeCodesEqualTheScalarReferenceBitwise) {
    SKIP_WITHOUT(GetParam());
    struct weight_case {
        tensor_type              t;
        size_t                   block_bytes;
        std::vector<size_t>      f16_fields;
    };
    // Q8_0, IQ4_NL, MXFP4, Q4_K, Q5_K and IQ4_XS: the AVX-512 kernels take their values
    // as unsigned codes up to 255 (value + 128) and remove the offset through sums of
    // the activation codes.
    const weight_case cases[] = {
        {tensor_type::q4_0, q4_0_block_bytes, {0}},
        {tensor_type::q5_0, q5_0_block_bytes, {q5_0_off_d}},
        {tensor_type::q5_1, q5_1_block_bytes, {q5_1_off_d, q5_1_off_m}},
        {tensor_type::q2_k, q2_k_block_bytes, {q2_k_off_d, q2_k_off_dmin}},
        {tensor_type::q3_k, q3_k_block_bytes, {q3_k_off_d}},
        {tensor_type::q6_k, q6_k_block_bytes, {q6_k_off_d}},
        {tensor_type::q8_0, q8_0_block_bytes, {0}},
        {tensor_type::iq4_nl, iq4_nl_block_bytes, {iq4_nl_off_d}},
        {tensor_type::mxfp4, mxfp4_block_bytes, {}},
        {tensor_type::q4_k, q4_k_block_bytes, {q4_k_off_d, q4_k_off_dmin}},
        {tensor_type::q5_k, q5_k_block_bytes, {q5_k_off_d, q5_k_off_dmin}},
        {tensor_type::iq4_xs, iq4_xs_block_bytes, {iq4_xs_off_d}},
    };
    for (const weight_case & c : cases) {
        const type_kernels & fast = path_of(GetParam(), c.t);
        const type_kernels & reference = scalar_of(c.t);
        // 33 rows: two full groups of the 16-row decode tiles and a row past them.
        const int64_t n = 2 * qk_k, n_rows = 33;
        const size_t w_row = row_bytes(c.t, n);
        ASSERT_EQ(w_row % c.block_bytes, 0u);
        for (int pattern = 0; pattern < 3; ++pattern) {
            std::vector<uint8_t> w(w_row * n_rows);
            uint64_t s = 12345;
            for (auto & byte : w) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                byte = pattern == 0 ? 0xff : pattern == 1 ? 0x00 : static_cast<uint8_t>(s >> 56);
            }
            for (size_t b = 0; b < w.size() / c.block_bytes; ++b) {
                for (size_t f = 0; f < c.f16_fields.size(); ++f) {
                    store_u16_le(w.data() + b * c.block_bytes + c.f16_fields[f], f32_to_f16(f == 0 ? 0.5f : 0.25f));
                }
            }
            std::vector<uint8_t> xs[2];
            fill_extreme_activations(fast.vec_dot_type, n, 127, xs[0]);
            fill_extreme_activations(fast.vec_dot_type, n, -127, xs[1]);
            for (const auto & x : xs) {
                std::vector<float> y(n_rows, -1.0f);
                fast.mul_tile(w.data(), w_row, n_rows, x.data(), x.size(), 1, n, y.data(), n_rows);
                for (int64_t r = 0; r < n_rows; ++r) {
                    const float expected = reference.vec_dot(w.data() + r * w_row, x.data(), n);
                    ASSERT_TRUE(same_bits(fast.vec_dot(w.data() + r * w_row, x.data(), n), expected))
                        << testing::type_param_name(c.t) << " pattern " << pattern << " code " << int(int8_t(x[x.size() - 1]));
                    ASSERT_TRUE(same_bits(y[r], expected)) << testing::type_param_name(c.t) << " pattern " << pattern
                                                           << " row " << r;
                }
            }
            // Batched decode steps (the decode tile's groups of 2 to 8 tokens, the paired
            // tile) and prefill tiles (every token lane of a 16-token group and
            // a pair of groups, 37 tokens): codes +127 and -127 alternating.
            const size_t x_row = xs[0].size();
            for (const int64_t n_tokens : {int64_t{2}, int64_t{3}, int64_t{4}, int64_t{6}, int64_t{8}, int64_t{37}}) {
                std::vector<uint8_t> xt;
                for (int64_t t = 0; t < n_tokens; ++t) xt.insert(xt.end(), xs[t % 2].begin(), xs[t % 2].end());
                std::vector<float> y(static_cast<size_t>(n_rows * n_tokens), -1.0f);
                fast.mul_tile(w.data(), w_row, n_rows, xt.data(), x_row, n_tokens, n, y.data(), n_rows);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t r = 0; r < n_rows; ++r) {
                        ASSERT_TRUE(same_bits(y[t * n_rows + r], reference.vec_dot(w.data() + r * w_row, xs[t % 2].data(), n)))
                            << testing::type_param_name(c.t) << " pattern " << pattern << " tokens " << n_tokens << " row " << r
                            << " token " << t;
                    }
                }
            }
        }
    }
}

// Rows that exercise the encoders' corner cases: ties after scaling, equal magnitudes
// of both signs, zeros of both signs, NaN and infinities, an all-zero block.
std::vector<std::vector<float>> special_rows(int64_t n) {
    std::vector<std::vector<float>> rows;
    for (uint64_t seed = 0; seed < 6; ++seed) rows.push_back(random_row(n, 500 + seed));
    auto ties = random_row(n, 600);
    for (int64_t i = 0; i + 6 <= n; i += 32) {
        ties[i] = -127.0f;  // scale 1: x * id lands on the ties below
        ties[i + 1] = 2.5f;
        ties[i + 2] = -3.5f;
        ties[i + 3] = 0.5f;
        ties[i + 4] = 127.0f;  // same magnitude, other sign, later: must not win
        ties[i + 5] = -0.0f;
    }
    rows.push_back(ties);
    auto first_positive = random_row(n, 601);
    for (int64_t i = 0; i + 4 <= n; i += 16) {
        first_positive[i] = 9.0f;
        first_positive[i + 3] = -9.0f;
    }
    rows.push_back(first_positive);
    auto nan_inf = random_row(n, 602);
    nan_inf[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
    if (n > 300) nan_inf[300] = std::numeric_limits<float>::infinity();
    if (n > 40) nan_inf[40] = -std::numeric_limits<float>::infinity();
    rows.push_back(nan_inf);
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < n; i += 3) zeros[static_cast<size_t>(i)] = -0.0f;
    rows.push_back(zeros);
    auto tiny = random_row(n, 603, 1e-30f);
    rows.push_back(tiny);
    auto huge = random_row(n, 604, 1e30f);
    rows.push_back(huge);
    return rows;
}

TEST_P(path_only, ActivationEncodersWriteTheScalarBytes) {
    SKIP_WITHOUT(GetParam());
    for (tensor_type at : {tensor_type::f16, tensor_type::bf16, tensor_type::q8_0, tensor_type::q8_1, tensor_type::q8_k}) {
        const int64_t block = testing::block_elems_of(at);
        for (int64_t n : block == 1 ? std::vector<int64_t>{1, 7, 15, 16, 17, 33, 512} : std::vector<int64_t>{block, 4 * block}) {
            for (const auto & x : special_rows(n)) {
                std::vector<uint8_t> reference(row_bytes(at, n)), fast(row_bytes(at, n), 0xee);
                scalar_of(at).from_float_activation(x.data(), reference.data(), n);
                path_of(GetParam(), at).from_float_activation(x.data(), fast.data(), n);
                ASSERT_EQ(reference, fast) << tensor_type_name(at) << " n " << n;
                if (at == tensor_type::f16) {  // F16's weight encoder too (the KV cache writes through it)
                    std::vector<uint8_t> weights(row_bytes(at, n), 0xee);
                    path_of(GetParam(), at).from_float(x.data(), weights.data(), n);
                    ASSERT_EQ(reference, weights) << "F16 from_float, n " << n;
                }
            }
        }
    }
}

TEST_P(path_only, DotRowsAndAddScaledRowsEqualTheScalarReference) {
    SKIP_WITHOUT(GetParam());
    const auto fast_of = [&](tensor_type t) -> const type_kernels & { return path_of(GetParam(), t); };
    for (tensor_type t : {tensor_type::f32, tensor_type::f16}) {
        for (int64_t n : {1, 7, 31, 32, 33, 64, 67, 128}) {
            const auto xs = random_row(n, 700);
            const auto ys = random_row(n, 701);
            std::vector<uint8_t> xb(row_bytes(t, n)), yb(row_bytes(t, n));
            scalar_of(t).from_float(xs.data(), xb.data(), n);
            scalar_of(t).from_float(ys.data(), yb.data(), n);
            EXPECT_TRUE(same_bits(scalar_of(t).vec_dot(xb.data(), yb.data(), n), fast_of(t).vec_dot(xb.data(), yb.data(), n)));
            // Rows: x, y, x again, with a stride larger than a row.
            const size_t rb = row_bytes(t, n), stride = rb + 6;
            std::vector<uint8_t> rows(3 * stride, 0x55);
            std::memcpy(rows.data(), xb.data(), rb);
            std::memcpy(rows.data() + stride, yb.data(), rb);
            std::memcpy(rows.data() + 2 * stride, xb.data(), rb);
            const float a[3] = {0.75f, -1e-3f, 3.0f};
            std::vector<float> acc_reference = random_row(n, 702), acc_fast = acc_reference;
            for (int64_t n_rows : {1, 3}) {
                scalar_of(t).add_scaled(a, rows.data(), stride, n_rows, acc_reference.data(), n);
                fast_of(t).add_scaled(a, rows.data(), stride, n_rows, acc_fast.data(), n);
            }
            EXPECT_EQ(std::memcmp(acc_reference.data(), acc_fast.data(), acc_fast.size() * sizeof(float)), 0)
                << tensor_type_name(t) << " n " << n;
        }
    }
}

// The heads variant (attention's query heads that share a KV head) against the scalar
// add_scaled once per head, bitwise: 1 to 9 heads (groups of four and the rest), row
// lengths with and without a tail past 64, 1 to 70 rows, weights with strides wider
// than the rows, values that include signed zeros, infinities and subnormals.
TEST_P(path_only, AddScaledHeadsEqualsTheScalarReferencePerHead) {
    SKIP_WITHOUT(GetParam());
    for (tensor_type t : {tensor_type::f32, tensor_type::f16}) {
        const type_kernels & fast = path_of(GetParam(), t);
        for (int64_t n : {16, 64, 67, 128, 200}) {
            for (int64_t n_rows : {1, 5, 70}) {
                const size_t rb = row_bytes(t, n), stride = rb + 10;
                std::vector<uint8_t> rows(static_cast<size_t>(n_rows) * stride, 0x55);
                for (int64_t r = 0; r < n_rows; ++r) {
                    auto v = random_row(n, 900 + static_cast<uint64_t>(r));
                    if (r == 1) {
                        v[0] = -0.0f;
                        v[1] = INFINITY;
                        v[2] = 1e-41f;
                    }
                    scalar_of(t).from_float(v.data(), rows.data() + static_cast<size_t>(r) * stride, n);
                }
                for (int32_t n_heads : {1, 3, 4, 5, 8, 9}) {
                    const int64_t a_stride = n_rows + 3, y_stride = n + 5;
                    const auto a = random_row(a_stride * n_heads, 950);
                    std::vector<float> reference = random_row(y_stride * n_heads, 951), got = reference;
                    for (int32_t g = 0; g < n_heads; ++g) {
                        scalar_of(t).add_scaled(a.data() + g * a_stride, rows.data(), stride, n_rows, reference.data() + g * y_stride, n);
                    }
                    if (fast.add_scaled_heads != nullptr) {
                        fast.add_scaled_heads(a.data(), a_stride, n_heads, rows.data(), stride, n_rows, got.data(), y_stride, n);
                    } else {
                        for (int32_t g = 0; g < n_heads; ++g) {
                            fast.add_scaled(a.data() + g * a_stride, rows.data(), stride, n_rows, got.data() + g * y_stride, n);
                        }
                    }
                    ASSERT_EQ(std::memcmp(reference.data(), got.data(), got.size() * sizeof(float)), 0)
                        << tensor_type_name(t) << " n " << n << " rows " << n_rows << " heads " << n_heads;
                }
            }
        }
    }
}

// The plain types' tiles (attention's scores: keys against a few query heads) for
// every row length with a tail, tiles of 1 to 9 rows and 1 to 8 tokens (the AVX-512
// F16 tile takes 8 rows x 4 tokens, two rows per vector), on random values and on rows
// full of signed zeros, infinities, subnormals and values whose products overflow.
TEST_P(path_only, PlainTypeTilesOfEveryRowLengthEqualVecDotBitwise) {
    SKIP_WITHOUT(GetParam());
    for (tensor_type t : {tensor_type::f32, tensor_type::f16, tensor_type::bf16}) {
        const type_kernels & k = path_of(GetParam(), t);
        ASSERT_NE(k.mul_tile, nullptr) << tensor_type_name(t);
        std::vector<int64_t> sizes = odd_sizes(t);
        sizes.insert(sizes.end(), {2, 4, 5, 6, 10, 24, 64, 128});
        for (int64_t n : sizes) {
            const auto w = weight_rows(t, 17, n, 90 + n);
            const auto x = activation_rows(t, 8, n, 91 + n);
            for (int64_t n_rows : {1, 2, 7, 8, 9, 16, 17}) {
                for (int64_t n_tokens : {1, 2, 3, 4, 5, 8}) {
                    check_tile(t, k, w, x, n, n_rows, n_tokens,
                               std::string(tensor_type_name(t)) + " n " + std::to_string(n) + ", " + std::to_string(n_rows) + "x" +
                                   std::to_string(n_tokens));
                    if (HasFatalFailure()) return;
                }
            }
        }
        // Special values, spread so that every lane and every tail sees some.
        const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                  1e-40f, -1e-40f, 6e4f, -6e4f, 1.0f, -3.5f, 0.0f, -0.0f, -0.0f};
        for (int64_t n : {3, 8, 13, 64}) {
            std::vector<float> wv(static_cast<size_t>(9 * n)), xv(static_cast<size_t>(5 * n));
            for (size_t i = 0; i < wv.size(); ++i) wv[i] = specials[(i * 7 + i / 5) % std::size(specials)];
            for (size_t i = 0; i < xv.size(); ++i) xv[i] = specials[(i * 3 + 1) % std::size(specials)] * (i % 4 == 0 ? 1e30f : 1.0f);
            std::vector<uint8_t> w(static_cast<size_t>(9) * row_bytes(t, n)), x(static_cast<size_t>(5) * row_bytes(t, n));
            for (int64_t r = 0; r < 9; ++r) scalar_of(t).from_float(wv.data() + r * n, w.data() + r * row_bytes(t, n), n);
            for (int64_t r = 0; r < 5; ++r) scalar_of(t).from_float(xv.data() + r * n, x.data() + r * row_bytes(t, n), n);
            for (int64_t n_rows : {1, 8, 9}) {
                for (int64_t n_tokens : {1, 4, 5}) {
                    check_tile(t, k, w, x, n, n_rows, n_tokens, std::string(tensor_type_name(t)) + " specials, n " + std::to_string(n));
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
}

// Inputs for the exp kernels: a sweep of the range, both ends, the values where the
// polynomial switches exponent, and the special values.
std::vector<float> exp_inputs() {
    std::vector<float> x;
    for (float v = -100.0f; v < 100.0f; v += 0.0371f) x.push_back(v);
    for (int k = -127; k <= 128; ++k) {
        const float v = static_cast<float>(k) * 0.69314718f;
        x.insert(x.end(), {v, std::nextafter(v, -1e9f), std::nextafter(v, 1e9f)});
    }
    x.insert(x.end(), {0.0f, -0.0f, 1e-30f, -1e-30f, -87.33654f, -87.3366f, 88.3f, 88.31f, 1e30f, -1e30f,
                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()});
    return x;
}

TEST(kernels_avx2, ExpAndSwigluEqualTheScalarReference) {
    SKIP_WITHOUT_AVX2();
    const auto x = exp_inputs();
    const auto up = random_row(static_cast<int64_t>(x.size()), 800);
    for (size_t n : {x.size(), size_t(1), size_t(7), size_t(13)}) {
        for (float shift : {0.0f, 3.5f, -2.0f}) {
            std::vector<float> reference(n), fast(n);
            scalar::exp_shifted(x.data(), shift, reference.data(), static_cast<int64_t>(n));
            avx2::exp_shifted(x.data(), shift, fast.data(), static_cast<int64_t>(n));
            ASSERT_EQ(std::memcmp(reference.data(), fast.data(), n * sizeof(float)), 0) << "exp, n " << n;
        }
        std::vector<float> reference(n), fast(n);
        scalar::swiglu(x.data(), up.data(), reference.data(), static_cast<int64_t>(n));
        avx2::swiglu(x.data(), up.data(), fast.data(), static_cast<int64_t>(n));
        ASSERT_EQ(std::memcmp(reference.data(), fast.data(), n * sizeof(float)), 0) << "swiglu, n " << n;
    }
}

TEST(kernels_avx512, ExpAndSwigluEqualTheScalarReference) {
    SKIP_WITHOUT(implementation::avx512);
    const auto x = exp_inputs();
    const auto up = random_row(static_cast<int64_t>(x.size()), 801);
    for (size_t n : {x.size(), size_t(1), size_t(7), size_t(15), size_t(16), size_t(17), size_t(33)}) {
        for (float shift : {0.0f, 3.5f, -2.0f}) {
            std::vector<float> reference(n), fast(n + 1, -7.0f);
            scalar::exp_shifted(x.data(), shift, reference.data(), static_cast<int64_t>(n));
            avx512::exp_shifted(x.data(), shift, fast.data(), static_cast<int64_t>(n));
            ASSERT_EQ(std::memcmp(reference.data(), fast.data(), n * sizeof(float)), 0) << "exp, n " << n;
            ASSERT_EQ(fast[n], -7.0f) << "wrote past the end";
        }
        std::vector<float> reference(n), fast(n + 1, -7.0f);
        scalar::swiglu(x.data(), up.data(), reference.data(), static_cast<int64_t>(n));
        avx512::swiglu(x.data(), up.data(), fast.data(), static_cast<int64_t>(n));
        ASSERT_EQ(std::memcmp(reference.data(), fast.data(), n * sizeof(float)), 0) << "swiglu, n " << n;
        ASSERT_EQ(fast[n], -7.0f) << "wrote past the end";
    }
}

// exp_shifted_rows is exp_shifted row by row, each row with its shift: rows in fours
// and a rest, tails, strides wider than the rows (the gaps untouched), and in place.
TEST(kernels_exp, RowsEqualExpShiftedRowByRow) {
    const auto inputs = exp_inputs();
    for (int32_t n_rows : {1, 3, 4, 5, 9}) {
        for (int64_t n : {1, 7, 15, 16, 17, 33}) {
            const int64_t stride = n + 3;
            std::vector<float> x(static_cast<size_t>(n_rows * stride)), shifts(static_cast<size_t>(n_rows));
            for (size_t i = 0; i < x.size(); ++i) x[i] = inputs[(i * 37 + static_cast<size_t>(n)) % inputs.size()];
            for (int32_t r = 0; r < n_rows; ++r) shifts[static_cast<size_t>(r)] = inputs[(static_cast<size_t>(r) * 101 + 5) % inputs.size()];
            std::vector<float> reference(x.size(), -7.0f);
            for (int32_t r = 0; r < n_rows; ++r) scalar::exp_shifted(x.data() + r * stride, shifts[static_cast<size_t>(r)], reference.data() + r * stride, n);
            const auto check = [&](const std::vector<float> & got, const char * path) {
                for (int32_t r = 0; r < n_rows; ++r) {
                    ASSERT_EQ(std::memcmp(reference.data() + r * stride, got.data() + r * stride, static_cast<size_t>(n) * sizeof(float)), 0)
                        << path << ", rows " << n_rows << ", n " << n << ", row " << r;
                    for (int64_t i = n; i < stride; ++i) ASSERT_EQ(got[static_cast<size_t>(r * stride + i)], -7.0f) << path << ": wrote in the gap";
                }
            };
            // Through the dispatcher on every path this CPU has.
            for (implementation impl : {implementation::scalar, implementation::avx2, implementation::avx512}) {
                if (!cpu_supports(impl)) continue;
                const scoped_path path(impl);
                std::vector<float> out(x.size(), -7.0f);
                exp_shifted_rows(x.data(), stride, shifts.data(), n_rows, out.data(), stride, n);
                check(out, active_implementation());
                // In place: the gaps of x keep x's values.
                std::vector<float> in_place = x;
                exp_shifted_rows(in_place.data(), stride, shifts.data(), n_rows, in_place.data(), stride, n);
                for (int32_t r = 0; r < n_rows; ++r) {
                    for (int64_t i = n; i < stride; ++i) in_place[static_cast<size_t>(r * stride + i)] = -7.0f;
                }
                check(in_place, active_implementation());
            }
        }
    }
}

// kernels.h promises exp_shifted(x, x) == 1 exactly for finite x (x - x is +0, and
// the polynomial gives 1 at 0): attention skips the call on that promise.
TEST(kernels_exp, AFiniteValueShiftedByItselfIsExactlyOne) {
    std::vector<float> x = exp_inputs();
    x.insert(x.end(), {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                       std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min()});
    int checked = 0;
    for (float v : x) {
        if (!std::isfinite(v)) continue;
        float y = 0.0f;
        scalar::exp_shifted(&v, v, &y, 1);
        ASSERT_EQ(y, 1.0f) << "scalar, x " << v;
        if (cpu_supports(implementation::avx2)) {
            y = 0.0f;
            avx2::exp_shifted(&v, v, &y, 1);
            ASSERT_EQ(y, 1.0f) << "avx2, x " << v;
        }
        if (cpu_supports(implementation::avx512)) {
            y = 0.0f;
            avx512::exp_shifted(&v, v, &y, 1);
            ASSERT_EQ(y, 1.0f) << "avx512, x " << v;
        }
        ++checked;
    }
    EXPECT_GT(checked, 1000);
}

// Arrays for argmax_first and all_finite: random logits of every length class around the
// vector widths, with ties (-0 and +0, repeated maxima), infinities and NaNs placed at
// the front, inside, in the tail and at the maximum's position.
std::vector<std::vector<float>> sampling_inputs() {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::vector<float>> cases;
    uint32_t seed = 900;
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 100, 1000, 32000}) {
        std::vector<float> base = random_row(n, seed++);
        cases.push_back(base);
        const size_t hi = static_cast<size_t>(std::max_element(base.begin(), base.end()) - base.begin());
        // A repeated maximum: the first one must win, also from the tail.
        for (size_t at : {size_t(0), hi / 2, base.size() - 1}) {
            std::vector<float> v = base;
            v[at] = v[hi];
            cases.push_back(v);
        }
        // All equal, all zeros of both signs, all negative infinities.
        cases.push_back(std::vector<float>(base.size(), 3.0f));
        std::vector<float> zeros(base.size(), -1.0f);
        for (size_t i = 0; i < zeros.size(); i += 3) zeros[i] = (i / 3) % 2 == 0 ? -0.0f : 0.0f;
        cases.push_back(zeros);
        cases.push_back(std::vector<float>(base.size(), -inf));
        // One special value at the front, the middle, the last and the maximum's place.
        for (float special : {nan, inf, -inf, std::numeric_limits<float>::max()}) {
            for (size_t at : {size_t(0), base.size() / 2, base.size() - 1, hi}) {
                std::vector<float> v = base;
                v[at] = special;
                cases.push_back(v);
            }
        }
        // NaNs everywhere but one place.
        std::vector<float> nans(base.size(), nan);
        nans[base.size() / 2] = -5.0f;
        cases.push_back(nans);
    }
    return cases;
}

TEST(kernels_sampling, ArgmaxAndFinitenessEqualTheScalarReference) {
    const auto cases = sampling_inputs();
    ASSERT_GT(cases.size(), 300u);
    for (size_t c = 0; c < cases.size(); ++c) {
        const std::vector<float> & v = cases[c];
        const int64_t n = static_cast<int64_t>(v.size());
        // The reference is the loop kernels.h states; check it against a plain search too.
        const int64_t want = scalar::argmax_first(v.data(), n);
        if (v[0] == v[0]) {
            for (int64_t i = 0; i < n; ++i) {
                if (v[static_cast<size_t>(i)] == v[static_cast<size_t>(i)]) {
                    ASSERT_FALSE(v[static_cast<size_t>(i)] > v[static_cast<size_t>(want)]) << "case " << c;
                    if (i < want) {
                        ASSERT_FALSE(v[static_cast<size_t>(i)] == v[static_cast<size_t>(want)]) << "case " << c;
                    }
                }
            }
        } else {
            ASSERT_EQ(want, 0) << "case " << c;
        }
        const bool finite = std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
        ASSERT_EQ(scalar::all_finite(v.data(), n), finite) << "case " << c;
        if (cpu_supports(implementation::avx2)) {
            ASSERT_EQ(avx2::argmax_first(v.data(), n), want) << "avx2, case " << c << ", n " << n;
            ASSERT_EQ(avx2::all_finite(v.data(), n), finite) << "avx2, case " << c << ", n " << n;
        }
        ASSERT_EQ(argmax_first(v.data(), n), want) << "dispatch, case " << c;
        ASSERT_EQ(all_finite(v.data(), n), finite) << "dispatch, case " << c;
    }
    if (!cpu_supports(implementation::avx2)) GTEST_SKIP() << "the scalar reference ran; the AVX2 path needs AVX2";
}

TEST(kernels_exp, ApproximationIsWithinAFewUlpOfExp) {
    for (float v : exp_inputs()) {
        const float got = scalar::exp_approx(v);
        if (std::isnan(v)) {
            EXPECT_TRUE(std::isnan(got));
        } else if (v < -87.33654f) {
            EXPECT_EQ(got, 0.0f) << v;
        } else {
            const double exact = std::exp(static_cast<double>(std::min(v, 88.3f)));
            EXPECT_NEAR(got / exact, 1.0, 4e-7) << v;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, path_only, ::testing::ValuesIn(k_fast_paths),
                         [](const auto & p) { return std::string(implementation_name(p.param)); });

TEST(kernels_avx2, ScalarTableHasNoTilesAndAvx2TableAcceleratesEveryWeightType) {
    for (tensor_type t : testing::weight_types()) {
        EXPECT_EQ(scalar_of(t).mul_tile, nullptr) << tensor_type_name(t);
        if (cpu_supports(implementation::avx2)) {
            EXPECT_NE(avx2_of(t).mul_tile, nullptr) << tensor_type_name(t);
            EXPECT_NE(avx2_of(t).vec_dot, scalar_of(t).vec_dot) << tensor_type_name(t);
        }
    }
}

// The AVX-512 table replaces the products (vec_dot and mul_tile) of every quantized
// weight type, the activation encoders of Q8_0, Q8_K, Q8_1 and F16, add_scaled of F32
// and F16, and F16's mul_tile; the other products of F32, F16 and BF16 keep the AVX2
// kernels.
TEST(kernels_avx512, Avx512TableReplacesTheQuantizedProductsAndEncoders) {
    SKIP_WITHOUT(implementation::avx512);
    const auto avx512_of = [](tensor_type t) -> const type_kernels & { return *kernel_table(implementation::avx512, t); };
    for (tensor_type t : {tensor_type::q8_0, tensor_type::q4_0, tensor_type::q5_0, tensor_type::q5_1, tensor_type::iq4_nl,
                          tensor_type::mxfp4, tensor_type::q2_k, tensor_type::q3_k, tensor_type::q4_k, tensor_type::q5_k,
                          tensor_type::q6_k, tensor_type::iq4_xs}) {
        EXPECT_NE(avx512_of(t).vec_dot, avx2_of(t).vec_dot) << tensor_type_name(t);
        EXPECT_NE(avx512_of(t).vec_dot, scalar_of(t).vec_dot) << tensor_type_name(t);
        EXPECT_NE(avx512_of(t).mul_tile, avx2_of(t).mul_tile) << tensor_type_name(t);
        EXPECT_NE(avx512_of(t).mul_tile, nullptr) << tensor_type_name(t);
    }
    for (tensor_type t : {tensor_type::q8_0, tensor_type::q8_k, tensor_type::q8_1, tensor_type::f16}) {
        EXPECT_NE(avx512_of(t).from_float_activation, avx2_of(t).from_float_activation) << tensor_type_name(t);
    }
    // F16's weight encoder is the same conversion (quantize_row, which the KV cache uses).
    EXPECT_EQ(avx512_of(tensor_type::f16).from_float, avx512_of(tensor_type::f16).from_float_activation);
    for (tensor_type t : {tensor_type::f32, tensor_type::f16, tensor_type::bf16}) {
        EXPECT_EQ(avx512_of(t).vec_dot, avx2_of(t).vec_dot) << tensor_type_name(t);
    }
    for (tensor_type t : {tensor_type::f32, tensor_type::bf16}) {
        EXPECT_EQ(avx512_of(t).mul_tile, avx2_of(t).mul_tile) << tensor_type_name(t);
    }
    EXPECT_NE(avx512_of(tensor_type::f16).mul_tile, avx2_of(tensor_type::f16).mul_tile);
    for (tensor_type t : {tensor_type::f32, tensor_type::f16}) {
        EXPECT_NE(avx512_of(t).add_scaled, avx2_of(t).add_scaled) << tensor_type_name(t);
    }
}

// Forcing a path by name: names round-trip, an unknown name and a path the CPU lacks are
// refused with a message that says why, and the automatic choice is the fastest path
// this CPU supports.
TEST(kernels_paths, SelectionByNameRefusesUnknownNamesAndPathsTheCpuLacks) {
    const implementation before = active_impl();
    const status bad = select_implementation("avx1024");
    EXPECT_EQ(bad.code(), error_code::invalid_argument);
    EXPECT_NE(bad.message().find("avx1024"), std::string::npos) << bad.message();
    EXPECT_EQ(active_impl(), before) << "a refused name must not change the path";
    const auto supported = supported_implementations();
    ASSERT_FALSE(supported.empty());
    EXPECT_EQ(supported.front(), "scalar");
    for (implementation impl : k_all_implementations) {
        const std::string name = implementation_name(impl);
        const status st = select_implementation(name);
        if (cpu_supports(impl)) {
            EXPECT_TRUE(st.is_ok()) << st.to_string();
            EXPECT_EQ(active_implementation(), name);
            EXPECT_STREQ(missing_cpu_features(impl), "");
            for (tensor_type t : testing::weight_types()) {
                ASSERT_NE(kernel_table(impl, t), nullptr) << name << " " << tensor_type_name(t);
                EXPECT_NE(kernel_table(impl, t)->vec_dot, nullptr) << name << " " << tensor_type_name(t);
            }
        } else {
            EXPECT_EQ(st.code(), error_code::unsupported) << name;
            EXPECT_NE(st.message().find(missing_cpu_features(impl)), std::string::npos) << st.message();
            EXPECT_NE(std::string(missing_cpu_features(impl)), "");
            EXPECT_EQ(kernel_table(impl, tensor_type::q8_0), nullptr) << name;
        }
    }
    ASSERT_TRUE(select_implementation("auto").is_ok());
    EXPECT_EQ(active_implementation(), supported.back());
    set_active_impl(before);
}

// The paths form a chain: a CPU that supports one supports every slower one.
TEST(kernels_paths, EachPathImpliesTheSlowerOnes) {
    bool slower_supported = true;
    for (implementation impl : k_all_implementations) {
        if (cpu_supports(impl)) {
            EXPECT_TRUE(slower_supported) << implementation_name(impl);
        }
        slower_supported = slower_supported && cpu_supports(impl);
    }
    std::printf("kernel paths this CPU runs:");
    for (const auto & name : supported_implementations()) std::printf(" %s", name.c_str());
    std::printf("\n");
}

}  // namespace
}  // namespace skippy::kernels
