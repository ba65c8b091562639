// In-process chains over loopback: lanes, chunking and slow links keep outputs exact.
#include "../model/model_fixture.h"
#include "chain_fixture.h"
#include "tls_test_certs.h"

#include <thread>

namespace skippy::testing {
namespace {

std::shared_ptr<const gguf::file> small_model(const char * arch = "llama", const char * type = "Q8_0") {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 256; o.n_layer = 4; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 512; o.n_vocab = 300; o.type = type;
    return synthetic_model(o);
}

std::vector<token_id> prompt_of(int n, int salt) {
    std::vector<token_id> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(3 + (i * 31 + salt * 17) % 290);
    return p;
}

TEST(chain_embedded, SplitsMatchTheMonolithicRunForEveryChunking) {
    auto file = small_model();
    ASSERT_NE(file, nullptr);
    auto whole = embedded_chain(file, 1);
    const auto prompt = prompt_of(41, 1);
    const auto want = greedy_tokens(*whole, prompt, 16);
    ASSERT_EQ(want.size(), 16u);
    for (int32_t stages : {2, 3, 4}) {
        auto chain = embedded_chain(file, stages);
        ASSERT_NE(chain, nullptr);
        for (int32_t chunk : {1, 7, 512}) {
            EXPECT_EQ(greedy_tokens(*chain, prompt, 16, 0, chunk), want) << stages << " stages, chunk " << chunk;
        }
    }
}

TEST(chain_embedded, ConcurrentLanesGiveTheirSequentialResults) {
    auto file = small_model("qwen2", "Q4_K_M");
    ASSERT_NE(file, nullptr);
    auto chain = embedded_chain(file, 3, 3);
    ASSERT_NE(chain, nullptr);
    std::vector<std::vector<token_id>> want;
    for (int i = 0; i < 6; ++i) want.push_back(greedy_tokens(*chain, prompt_of(20 + i, i), 10));
    std::vector<std::vector<token_id>> got(6);
    std::vector<std::thread> threads;
    for (int lane = 0; lane < 3; ++lane) {
        threads.emplace_back([&, lane] {
            for (int i = lane; i < 6; i += 3) got[static_cast<size_t>(i)] = greedy_tokens(*chain, prompt_of(20 + i, i), 10, lane);
        });
    }
    for (auto & t : threads) t.join();
    EXPECT_EQ(got, want);
}

TEST(chain_embedded, SampledTokensMatchTheMonolithicRunWithTheSameSeed) {
    auto file = small_model();
    auto whole = embedded_chain(file, 1);
    auto chain = embedded_chain(file, 3);
    generation_request req;
    req.prompt = prompt_of(12, 5);
    req.max_tokens = 20;
    req.sampling.temperature = 1.3f;
    req.sampling.top_k = 50;
    req.sampling.repeat_penalty = 1.2f;
    req.sampling.seed = 99;
    auto a = run_generation(*whole, 0, req);
    auto b = run_generation(*chain, 0, req);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(a->tokens, b->tokens) << "the penalty window and the seed travel with the chain";
}

TEST(chain_embedded, SlowLinksChangeTimingNotTokens) {
    auto file = small_model();
    auto whole = embedded_chain(file, 1);
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = 128;
    transport::chain_options slow;
    slow.link.wire_delay_ms = 2;
    auto chain = transport::make_embedded_chain(file, 2, so, slow);
    ASSERT_TRUE(chain.is_ok());
    const auto prompt = prompt_of(30, 2);
    EXPECT_EQ(greedy_tokens(**chain, prompt, 8, 0, 4), greedy_tokens(*whole, prompt, 8));
}

TEST(chain_embedded, TlsLinksGiveTheMonolithicTokensOnConcurrentLanes) {
    auto file = small_model("qwen2", "Q4_K_M");
    ASSERT_NE(file, nullptr);
    auto whole = embedded_chain(file, 1);
    transport::test_util::test_pki pki;
    auto tls = transport::tls_context::load(pki.files("stage-a"));
    ASSERT_TRUE(tls.is_ok()) << tls.error().to_string();
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = 128;
    so.n_lanes = 2;
    for (bool keyed : {false, true}) {
        transport::chain_options co;
        co.link.tls = *tls;
        if (keyed) co.link.stage_key = "tls and a stage key, 32 bytes long";
        auto chain = transport::make_embedded_chain(file, 3, so, co);
        ASSERT_TRUE(chain.is_ok()) << chain.error().to_string();
        std::vector<std::vector<token_id>> got(4);
        std::vector<std::thread> threads;
        for (int lane = 0; lane < 2; ++lane) {
            threads.emplace_back([&, lane] {
                for (int i = lane; i < 4; i += 2) got[static_cast<size_t>(i)] = greedy_tokens(**chain, prompt_of(25 + i, i), 8, lane);
            });
        }
        for (auto & t : threads) t.join();
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(got[static_cast<size_t>(i)], greedy_tokens(*whole, prompt_of(25 + i, i), 8)) << "prompt " << i << " keyed " << keyed;
        }
    }
}

TEST(chain_embedded, StatsCarryQueueAndForwardTimes) {
    auto file = small_model();
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = 128;
    for (int32_t stages : {2, 3}) {
        auto chain = transport::make_embedded_chain(file, stages, so, {});
        ASSERT_TRUE(chain.is_ok());
        ASSERT_EQ(greedy_tokens(**chain, prompt_of(9, 3), 4, 0, 4).size(), 4u);
        const protocol::stats_block st = (*chain)->last_stats(0);
        // A measured interval is reported as at least 1 us (docs/protocol.md), so a
        // non-zero field is one that was filled, however short the wait.
        EXPECT_GT(st.max_queue_us, 0u) << stages << " stages: no stage reported its queue time";
        EXPECT_GT(st.max_forward_us, 0u) << stages << " stages: no stage reported its forward time";
    }
}

TEST(chain_embedded, ContextOverflowIsAnErrorAndTheLaneRecovers) {
    auto file = small_model();
    auto chain = embedded_chain(file, 2, 1, 1, 32);
    generation_request too_long;
    too_long.prompt = prompt_of(40, 0);
    too_long.max_tokens = 2;
    EXPECT_FALSE(run_generation(*chain, 0, too_long).is_ok());
    EXPECT_EQ(greedy_tokens(*chain, prompt_of(10, 0), 4).size(), 4u);
}

}  // namespace
}  // namespace skippy::testing
