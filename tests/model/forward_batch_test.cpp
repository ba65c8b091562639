// forward_batch: one pass over the weights for several sequences. Every row must be
// bitwise the row its sequence gives when run alone, whatever the mix of spans (lengths,
// positions, order) and the thread count, on every family; bad batches are refused
// before anything is computed.
#include "model_fixture.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace skippy::testing {
namespace {

synthetic_model_options family_model(const std::string & arch) {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 128; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 256; o.n_vocab = 300;
    o.type = "Q8_0";
    o.sliding_window = 12;  // gemma3: shorter than most sequences below
    return o;
}

constexpr int32_t k_n_seqs = 5;
constexpr int64_t k_max_len = 120;

struct bound_model {
    std::shared_ptr<const gguf::file>    file;
    std::unique_ptr<model_slice>         slice;
};

bound_model bind_whole(const synthetic_model_options & o) {
    bound_model m;
    m.file = synthetic_model(o);
    if (!m.file) return m;
    auto hp = model_hparams::from_gguf(*m.file);
    EXPECT_TRUE(hp.is_ok());
    auto s = model_slice::bind(m.file, {0, hp->n_layer});
    EXPECT_TRUE(s.is_ok()) << s.error().to_string();
    if (s.is_ok()) m.slice = std::move(s).value();
    return m;
}

std::vector<std::vector<token_id>> random_sequences(std::mt19937 & rng, int32_t n_vocab) {
    std::vector<std::vector<token_id>> seqs(k_n_seqs);
    for (auto & s : seqs) {
        s.resize(static_cast<size_t>(k_max_len));
        for (auto & t : s) t = static_cast<token_id>(rng() % static_cast<uint32_t>(n_vocab));
    }
    return seqs;
}

// Hidden rows after every layer of each sequence run alone, in one call.
std::vector<std::vector<float>> alone(const model_slice & slice, const std::vector<std::vector<token_id>> & seqs) {
    const int64_t n_embd = slice.hparams().n_embd;
    kv_pool pool(slice.kv_geometry_for(kv_dtype::f16), 64);
    forward_workspace ws;
    std::vector<std::vector<float>> out;
    for (const auto & s : seqs) {
        kv_sequence kv(pool);
        std::vector<float> x(s.size() * static_cast<size_t>(n_embd));
        EXPECT_TRUE(slice.embed(s, x.data()).is_ok());
        EXPECT_TRUE(slice.forward_layers(x.data(), static_cast<int64_t>(s.size()), 0, kv, nullptr, ws).is_ok());
        out.push_back(std::move(x));
    }
    return out;
}

class forward_batch_mix : public ::testing::TestWithParam<const char *> {};

// Random batches: each takes a random subset of the sequences in random order, each
// with a random count of its next tokens (1..40), until every sequence is done.
TEST_P(forward_batch_mix, EveryRowEqualsItsSequenceRunAlone) {
    auto m = bind_whole(family_model(GetParam()));
    ASSERT_NE(m.slice, nullptr);
    const model_slice & slice = *m.slice;
    const int64_t n_embd = slice.hparams().n_embd;
    std::mt19937 rng(1234);
    const auto seqs = random_sequences(rng, slice.hparams().n_vocab);
    const auto want = alone(slice, seqs);

    for (int32_t n_threads : {1, 2, 4}) {
        kernels::thread_pool threads(n_threads);
        kv_pool pool(slice.kv_geometry_for(kv_dtype::f16), 64);
        std::vector<std::unique_ptr<kv_sequence>> kvs;
        for (int32_t i = 0; i < k_n_seqs; ++i) kvs.push_back(std::make_unique<kv_sequence>(pool));
        std::vector<int64_t> done(k_n_seqs, 0);
        forward_workspace ws;
        int n_batches = 0, n_mixed = 0;
        while (std::any_of(done.begin(), done.end(), [](int64_t d) { return d < k_max_len; })) {
            std::vector<int32_t> order(k_n_seqs);
            for (int32_t i = 0; i < k_n_seqs; ++i) order[static_cast<size_t>(i)] = i;
            std::shuffle(order.begin(), order.end(), rng);
            std::vector<sequence_span> spans;
            std::vector<int32_t> owner;
            std::vector<token_id> tokens;
            for (int32_t i : order) {
                if (done[static_cast<size_t>(i)] == k_max_len || rng() % 3 == 0) continue;
                const int64_t n = std::min<int64_t>(1 + rng() % 40, k_max_len - done[static_cast<size_t>(i)]);
                spans.push_back({kvs[static_cast<size_t>(i)].get(), done[static_cast<size_t>(i)], n});
                owner.push_back(i);
                const auto & s = seqs[static_cast<size_t>(i)];
                tokens.insert(tokens.end(), s.begin() + done[static_cast<size_t>(i)], s.begin() + done[static_cast<size_t>(i)] + n);
            }
            if (spans.empty()) continue;
            std::vector<float> x(tokens.size() * static_cast<size_t>(n_embd));
            ASSERT_TRUE(slice.embed(tokens, x.data()).is_ok());
            status st = slice.forward_batch(x.data(), spans, &threads, ws);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            size_t row = 0;
            for (size_t k = 0; k < spans.size(); ++k) {
                const auto & ref = want[static_cast<size_t>(owner[k])];
                for (int64_t t = 0; t < spans[k].n_tokens; ++t, ++row) {
                    const float * got = x.data() + row * static_cast<size_t>(n_embd);
                    const float * exp = ref.data() + static_cast<size_t>(spans[k].pos_start + t) * static_cast<size_t>(n_embd);
                    ASSERT_EQ(std::memcmp(got, exp, static_cast<size_t>(n_embd) * sizeof(float)), 0)
                        << GetParam() << ": sequence " << owner[k] << " position " << spans[k].pos_start + t << ", batch "
                        << n_batches << " of " << spans.size() << " spans, " << n_threads << " threads";
                }
                done[static_cast<size_t>(owner[k])] += spans[k].n_tokens;
            }
            ++n_batches;
            if (spans.size() > 1) ++n_mixed;
        }
        EXPECT_GT(n_mixed, 3) << "the batches must mix sequences";
    }
}

INSTANTIATE_TEST_SUITE_P(families, forward_batch_mix, ::testing::Values("llama", "llama3", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe", "gpt-oss"),
                         [](const auto & param_info) { std::string s = param_info.param; return s == "gpt-oss" ? std::string("gptoss") : s; });

// A batch of more rows than one internal pass (256): a pass boundary falls inside a
// span, and the later pass finds the earlier one's K/V.
TEST(forward_batch, ABatchLongerThanOnePassEqualsTheSequencesAlone) {
    auto m = bind_whole(family_model("gemma3"));
    ASSERT_NE(m.slice, nullptr);
    const model_slice & slice = *m.slice;
    std::mt19937 rng(99);
    const auto seqs = random_sequences(rng, slice.hparams().n_vocab);
    const auto want = alone(slice, seqs);
    kv_pool pool(slice.kv_geometry_for(kv_dtype::f16), 64);
    std::vector<std::unique_ptr<kv_sequence>> kvs;
    std::vector<sequence_span> spans;
    std::vector<token_id> tokens;
    for (int32_t i = 0; i < 3; ++i) {
        kvs.push_back(std::make_unique<kv_sequence>(pool));
        spans.push_back({kvs.back().get(), 0, k_max_len});
        tokens.insert(tokens.end(), seqs[static_cast<size_t>(i)].begin(), seqs[static_cast<size_t>(i)].end());
    }
    std::vector<float> x(tokens.size() * 128);
    ASSERT_TRUE(slice.embed(tokens, x.data()).is_ok());
    forward_workspace ws;
    kernels::thread_pool threads(2);
    ASSERT_TRUE(slice.forward_batch(x.data(), spans, &threads, ws).is_ok());
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(std::memcmp(x.data() + i * want[i].size(), want[i].data(), want[i].size() * sizeof(float)), 0) << "sequence " << i;
    }
}

TEST(forward_batch, SpansSharingAKvAreRefused) {
    auto m = bind_whole(family_model("llama"));
    ASSERT_NE(m.slice, nullptr);
    kv_pool pool(m.slice->kv_geometry_for(kv_dtype::f16), 8);
    kv_sequence kv(pool);
    forward_workspace ws;
    std::vector<float> x(4 * 128);
    const sequence_span spans[] = {{&kv, 0, 2}, {&kv, 2, 2}};
    EXPECT_EQ(m.slice->forward_batch(x.data(), spans, nullptr, ws).code(), error_code::invalid_argument);
    EXPECT_EQ(kv.n_tokens(), 0);
}

TEST(forward_batch, ASpanPastItsKvIsRefusedAndNothingIsComputed) {
    auto m = bind_whole(family_model("qwen3"));
    ASSERT_NE(m.slice, nullptr);
    kv_pool pool(m.slice->kv_geometry_for(kv_dtype::f16), 8);
    kv_sequence a(pool), b(pool);
    forward_workspace ws;
    std::vector<float> x(6 * 128, 0.5f);
    const std::vector<float> before = x;
    const sequence_span spans[] = {{&a, 0, 3}, {&b, 2, 3}};  // b holds no positions
    EXPECT_EQ(m.slice->forward_batch(x.data(), spans, nullptr, ws).code(), error_code::invalid_argument);
    EXPECT_EQ(a.n_tokens(), 0);
    EXPECT_EQ(x, before);
    const sequence_span null_kv[] = {{nullptr, 0, 1}};
    EXPECT_EQ(m.slice->forward_batch(x.data(), null_kv, nullptr, ws).code(), error_code::invalid_argument);
}

// A pool with room for one span but not both: the batch fails, and the first span's KV
// keeps exactly its earlier positions.
TEST(forward_batch, AFullPoolFailsTheWholeBatchAndRollsBack) {
    auto m = bind_whole(family_model("gemma3"));
    ASSERT_NE(m.slice, nullptr);
    kv_pool pool(m.slice->kv_geometry_for(kv_dtype::f16, 16), 3);
    kv_sequence a(pool), b(pool);
    forward_workspace ws;
    std::vector<float> x(20 * 128);
    const std::vector<token_id> ids(20, 7);
    ASSERT_TRUE(m.slice->embed(std::span(ids).first(5), x.data()).is_ok());
    ASSERT_TRUE(m.slice->forward_layers(x.data(), 5, 0, a, nullptr, ws).is_ok());
    const int64_t free_before = pool.n_free();
    const sequence_span spans[] = {{&a, 5, 12}, {&b, 0, 40}};  // a needs one more block, b three
    EXPECT_EQ(m.slice->forward_batch(x.data(), spans, nullptr, ws).code(), error_code::unavailable);
    EXPECT_EQ(a.n_tokens(), 5);
    EXPECT_EQ(b.n_tokens(), 0);
    EXPECT_EQ(pool.n_free(), free_before);
}

TEST(forward_batch, EmptyBatchesAndEmptySpansComputeNothing) {
    auto m = bind_whole(family_model("phi3"));
    ASSERT_NE(m.slice, nullptr);
    kv_pool pool(m.slice->kv_geometry_for(kv_dtype::f16), 8);
    kv_sequence a(pool), b(pool);
    forward_workspace ws;
    EXPECT_TRUE(m.slice->forward_batch(nullptr, {}, nullptr, ws).is_ok());
    const std::vector<token_id> ids = {1, 2, 3};
    std::vector<float> x(3 * 128), y(3 * 128);
    ASSERT_TRUE(m.slice->embed(ids, x.data()).is_ok());
    y = x;
    const sequence_span spans[] = {{&a, 0, 0}, {&b, 0, 3}};
    ASSERT_TRUE(m.slice->forward_batch(x.data(), spans, nullptr, ws).is_ok());
    kv_sequence c(pool);
    ASSERT_TRUE(m.slice->forward_layers(y.data(), 3, 0, c, nullptr, ws).is_ok());
    EXPECT_EQ(x, y);
    EXPECT_EQ(a.n_tokens(), 0);
    EXPECT_EQ(b.n_tokens(), 3);
}

}  // namespace
}  // namespace skippy::testing
