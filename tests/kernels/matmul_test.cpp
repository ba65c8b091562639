// matmul: every output is the dot product of its weight row and converted token row,
// bit for bit, whatever the batch, the token's place in it and the thread count.
#include "kernel_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <thread>
#include <vector>

namespace skippy::kernels {
namespace {

using testing::encode;
using testing::encode_activation;
using testing::random_row;

struct weights {
    tensor_type          type;
    int64_t              n_rows;
    int64_t              n_cols;
    std::vector<uint8_t> bytes;

    matrix_view view() const { return {type, bytes.data(), n_cols, n_rows}; }
    const uint8_t * row(int64_t r) const { return bytes.data() + r * row_bytes(type, n_cols); }
};

weights make_weights(tensor_type t, int64_t n_rows, int64_t n_cols, uint64_t seed) {
    weights w{t, n_rows, n_cols, {}};
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto row = encode(t, random_row(n_cols, seed * 1000 + r, 0.05f));
        w.bytes.insert(w.bytes.end(), row.begin(), row.end());
    }
    return w;
}

// Columns: a few blocks, not a power of two.
int64_t test_n_cols(tensor_type t) { return testing::block_elems_of(t) == 256 ? 768 : 160; }

std::vector<float> token_rows(int64_t n_tokens, int64_t n_cols, uint64_t seed) {
    std::vector<float> x;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const auto row = random_row(n_cols, seed + t);
        x.insert(x.end(), row.begin(), row.end());
    }
    return x;
}

bool bitwise_equal(const float * a, const float * b, int64_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

class matmul_per_type : public ::testing::TestWithParam<tensor_type> {};

TEST_P(matmul_per_type, EveryOutputIsTheVecDotOfItsRowAndConvertedToken) {
    const tensor_type t = GetParam();
    const auto w = make_weights(t, 37, test_n_cols(t), 1);
    const int64_t n_tokens = 3;
    const auto x = token_rows(n_tokens, w.n_cols, 50);
    std::vector<float> y(n_tokens * w.n_rows);
    thread_pool pool(2);
    matmul(w.view(), x.data(), n_tokens, y.data(), &pool);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        const auto xq = encode_activation(t, std::vector<float>(x.begin() + tok * w.n_cols, x.begin() + (tok + 1) * w.n_cols));
        for (int64_t r = 0; r < w.n_rows; ++r) {
            const float expected = active_kernels(t)->vec_dot(w.row(r), xq.data(), w.n_cols);
            ASSERT_TRUE(bitwise_equal(&y[tok * w.n_rows + r], &expected, 1)) << "token " << tok << " row " << r;
        }
    }
}

TEST_P(matmul_per_type, TokenResultIsBitwiseIndependentOfBatchPositionAndThreads) {
    const tensor_type t = GetParam();
    const auto w = make_weights(t, 67, test_n_cols(t), 2);  // odd row count
    const int64_t n_all = 65;
    const auto x = token_rows(n_all, w.n_cols, 90);

    // Each token computed alone, on the calling thread.
    std::vector<float> alone(n_all * w.n_rows);
    for (int64_t tok = 0; tok < n_all; ++tok) {
        matmul(w.view(), x.data() + tok * w.n_cols, 1, alone.data() + tok * w.n_rows, nullptr);
    }

    std::vector<std::unique_ptr<thread_pool>> pools;
    pools.push_back(nullptr);
    for (int n_threads : {1, 2, 3, 4}) pools.push_back(std::make_unique<thread_pool>(n_threads));

    for (const auto & pool : pools) {
        for (int64_t batch : {1, 3, 7, 64, 65}) {
            for (int64_t start : {int64_t(0), int64_t(5), int64_t(64)}) {
                // Tokens start, start + 1, ... (wrapping), so each lands at new positions.
                std::vector<float> xb;
                for (int64_t i = 0; i < batch; ++i) {
                    const int64_t tok = (start + i) % n_all;
                    xb.insert(xb.end(), x.begin() + tok * w.n_cols, x.begin() + (tok + 1) * w.n_cols);
                }
                std::vector<float> y(batch * w.n_rows);
                matmul(w.view(), xb.data(), batch, y.data(), pool.get());
                for (int64_t i = 0; i < batch; ++i) {
                    const int64_t tok = (start + i) % n_all;
                    ASSERT_TRUE(bitwise_equal(&y[i * w.n_rows], &alone[tok * w.n_rows], w.n_rows))
                        << "threads " << (pool ? pool->n_threads() : 0) << " batch " << batch << " start " << start
                        << " token " << tok;
                }
            }
        }
    }
}

TEST_P(matmul_per_type, ConcurrentCallersSharingAPoolGetTheSameBits) {
    const tensor_type t = GetParam();
    const auto w = make_weights(t, 29, test_n_cols(t), 3);
    const int64_t n_tokens = 9;
    const auto x = token_rows(n_tokens, w.n_cols, 7);
    std::vector<float> expected(n_tokens * w.n_rows);
    matmul(w.view(), x.data(), n_tokens, expected.data(), nullptr);

    thread_pool pool(3);
    std::vector<std::vector<float>> results(3, std::vector<float>(n_tokens * w.n_rows));
    std::vector<std::thread> callers;
    for (int c = 0; c < 3; ++c) {
        callers.emplace_back([&, c] {
            for (int rep = 0; rep < 5; ++rep) matmul(w.view(), x.data(), n_tokens, results[c].data(), &pool);
        });
    }
    for (auto & th : callers) th.join();
    for (const auto & y : results) EXPECT_TRUE(bitwise_equal(y.data(), expected.data(), n_tokens * w.n_rows));
}

// Products sharing an input (Q, K, V) in one call: each output is what matmul alone
// writes, whatever the types mixed (F32, plain and quantized activation formats: F16,
// Q8_0, Q8_1, Q8_K).
TEST(kernels_matmul, ManyProductsOfOneInputEqualSeparateCalls) {
    const int64_t n_cols = 256;
    const std::vector<weights> ws = {make_weights(tensor_type::q4_k, 40, n_cols, 11), make_weights(tensor_type::q6_k, 17, n_cols, 12),
                                     make_weights(tensor_type::q8_0, 9, n_cols, 13), make_weights(tensor_type::f32, 5, n_cols, 14),
                                     make_weights(tensor_type::f16, 33, n_cols, 15), make_weights(tensor_type::q5_1, 11, n_cols, 16),
                                     make_weights(tensor_type::iq4_nl, 7, n_cols, 17), make_weights(tensor_type::q3_k, 19, n_cols, 18)};
    thread_pool pool(3);
    for (int64_t n_tokens : {1, 8, 13}) {
        const auto x = token_rows(n_tokens, n_cols, 21);
        std::vector<std::vector<float>> separate, together;
        std::vector<matmul_output> outs;
        for (const auto & w : ws) {
            separate.emplace_back(static_cast<size_t>(n_tokens * w.n_rows));
            together.emplace_back(static_cast<size_t>(n_tokens * w.n_rows));
            matmul(w.view(), x.data(), n_tokens, separate.back().data(), nullptr);
        }
        for (size_t i = 0; i < ws.size(); ++i) outs.push_back({ws[i].view(), together[i].data()});
        matmul_many(outs, x.data(), n_tokens, &pool);
        for (size_t i = 0; i < ws.size(); ++i) {
            EXPECT_TRUE(bitwise_equal(separate[i].data(), together[i].data(), n_tokens * ws[i].n_rows))
                << "product " << i << " tokens " << n_tokens;
        }
    }
}

// Products with inputs of their own (the experts of a MoE layer, each over the rows
// routed to it, some over none, two sharing an input): each output is what matmul
// alone writes, and the rows of an empty job are left alone.
TEST(kernels_matmul, GroupedProductsOfOwnInputsEqualSeparateCalls) {
    const int64_t n_cols = 256;
    const std::vector<weights> ws = {make_weights(tensor_type::q4_k, 40, n_cols, 31), make_weights(tensor_type::q8_0, 24, n_cols, 32),
                                     make_weights(tensor_type::mxfp4, 17, n_cols, 33), make_weights(tensor_type::f32, 5, n_cols, 34),
                                     make_weights(tensor_type::q6_k, 33, n_cols, 35), make_weights(tensor_type::q5_0, 9, n_cols, 36),
                                     make_weights(tensor_type::f16, 12, n_cols, 37), make_weights(tensor_type::iq4_xs, 16, n_cols, 38),
                                     make_weights(tensor_type::q8_0, 20, n_cols, 39)};
    const std::vector<int64_t> n_tokens = {3, 1, 0, 7, 2, 5, 1, 4, 3};
    std::vector<std::vector<float>> inputs;
    for (size_t i = 0; i < ws.size(); ++i) inputs.push_back(token_rows(std::max<int64_t>(1, n_tokens[i]), n_cols, 40 + static_cast<uint64_t>(i)));
    inputs[8] = inputs[0];  // jobs 0 and 8 share one input (a gate and an up projection)
    for (int n_threads : {1, 3}) {
        thread_pool pool(n_threads);
        std::vector<std::vector<float>> separate, together;
        std::vector<matmul_job> jobs;
        for (size_t i = 0; i < ws.size(); ++i) {
            separate.emplace_back(static_cast<size_t>(std::max<int64_t>(1, n_tokens[i]) * ws[i].n_rows), 42.0f);
            together.emplace_back(separate.back().size(), 42.0f);
            matmul(ws[i].view(), inputs[i].data(), n_tokens[i], separate.back().data(), nullptr);
        }
        for (size_t i = 0; i < ws.size(); ++i) {
            jobs.push_back({ws[i].view(), i == 8 ? inputs[0].data() : inputs[i].data(), n_tokens[i], together[i].data()});
        }
        matmul_grouped(jobs, &pool);
        for (size_t i = 0; i < ws.size(); ++i) {
            EXPECT_TRUE(bitwise_equal(separate[i].data(), together[i].data(), static_cast<int64_t>(separate[i].size())))
                << "job " << i << " threads " << n_threads;
        }
        for (float v : together[2]) EXPECT_EQ(v, 42.0f);
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, matmul_per_type, ::testing::ValuesIn(testing::weight_types()),
                         [](const auto & p) { return testing::type_param_name(p.param); });

TEST(kernels_matmul, NoTokensOrNoRowsWritesNothing) {
    const auto w = make_weights(tensor_type::q8_0, 4, 64, 4);
    const auto x = token_rows(2, 64, 1);
    std::vector<float> y(8, 42.0f);
    thread_pool pool(2);
    matmul(w.view(), x.data(), 0, y.data(), &pool);
    matrix_view empty = w.view();
    empty.n_rows = 0;
    matmul(empty, x.data(), 2, y.data(), &pool);
    for (float v : y) EXPECT_EQ(v, 42.0f);
}

TEST(kernels_matmul, F32ProductMatchesDoublePrecisionReference) {
    const auto w = make_weights(tensor_type::f32, 13, 1000, 5);
    const auto x = token_rows(3, 1000, 2);
    std::vector<float> y(3 * 13);
    matmul(w.view(), x.data(), 3, y.data(), nullptr);
    for (int64_t tok = 0; tok < 3; ++tok) {
        for (int64_t r = 0; r < 13; ++r) {
            double exact = 0, abs_sum = 0;
            for (int64_t i = 0; i < 1000; ++i) {
                float wv;
                std::memcpy(&wv, w.row(r) + 4 * i, 4);
                exact += double(wv) * x[tok * 1000 + i];
                abs_sum += std::fabs(double(wv) * x[tok * 1000 + i]);
            }
            EXPECT_NEAR(y[tok * 13 + r], exact, abs_sum * 1e-5);
        }
    }
}

TEST(kernels, ImplementationIsNamedAndForcedToScalarByEnvironment) {
    const std::string name = active_implementation();
    EXPECT_TRUE(name == "scalar" || name == "avx2" || name == "avx512" || name == "amx") << name;
    EXPECT_EQ(name == "scalar", active_impl() == implementation::scalar);
    // CTest also runs this test with SKIPPY_KERNELS=scalar (tests/kernels/CMakeLists.txt).
    const char * env = std::getenv("SKIPPY_KERNELS");
    if (env != nullptr && std::string(env) == "scalar") {
        EXPECT_EQ(name, "scalar");
    }
    for (tensor_type t : testing::weight_types()) EXPECT_TRUE(is_supported(t)) << tensor_type_name(t);
    EXPECT_FALSE(is_supported(tensor_type::q8_k));  // activations only
    EXPECT_FALSE(is_supported(tensor_type::q8_1));  // activations only
    EXPECT_FALSE(is_supported(tensor_type::q4_1));
}

}  // namespace
}  // namespace skippy::kernels
