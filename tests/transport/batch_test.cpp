// Batched steps (docs/transport.md, "Lanes and steps"): however requests overlap —
// random prompt lengths, shared prefixes, arrival times, sampling, chunk sizes, the
// prefix cache on — every request's tokens equal its solo run, on 1, 2 and 3 stages;
// steps really hold several lanes; and a lane that is cancelled or fails mid-step
// leaves the others' requests exact.
#include "../model/model_fixture.h"
#include "cache_fixture.h"

#include <atomic>
#include <random>
#include <thread>

namespace skippy::testing {
namespace {

std::shared_ptr<const gguf::file> model() {
    synthetic_model_options o;
    o.n_embd = 64; o.n_layer = 3; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300; o.type = "Q8_0";
    return synthetic_model(o);
}

struct random_request {
    generation_request req;
    int32_t            delay_us = 0;  // before it arrives
};

std::vector<random_request> random_requests(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::vector<token_id>> bases;
    for (int b = 0; b < 4; ++b) bases.push_back(tokens_of(48, 50 + b));
    std::vector<random_request> out;
    for (int i = 0; i < n; ++i) {
        random_request r;
        const auto & base = bases[rng() % bases.size()];
        const size_t shared = rng() % (base.size() + 1);
        r.req.prompt.assign(base.begin(), base.begin() + static_cast<ptrdiff_t>(shared));
        if (r.req.prompt.empty()) r.req.prompt.push_back(1);
        const int suffix = 1 + static_cast<int>(rng() % 40);
        for (int t = 0; t < suffix; ++t) r.req.prompt.push_back(static_cast<token_id>(3 + rng() % 290));
        r.req.max_tokens = 1 + static_cast<int32_t>(rng() % 10);
        const int32_t chunks[] = {4, 16, 512};
        r.req.prefill_chunk_tokens = chunks[rng() % 3];
        if (rng() % 2) {
            r.req.sampling.temperature = 0;
        } else {
            r.req.sampling.temperature = 0.9f;
            r.req.sampling.top_k = 20;
            r.req.sampling.repeat_penalty = 1.1f;
            r.req.sampling.seed = rng();
        }
        r.delay_us = static_cast<int32_t>(rng() % 3000);
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<token_id> run_tokens(pipeline_i & p, int32_t lane, const generation_request & req) {
    auto res = run_generation(p, lane, req);
    EXPECT_TRUE(res.is_ok()) << res.error().to_string();
    return res.is_ok() ? res->tokens : std::vector<token_id>{};
}

// Steps of more than one lane that stage `index` of `p` ran (its step histogram).
int64_t multi_lane_steps(transport::chain_pipeline & p, int32_t index) {
    for (const auto & s : p.stage_snapshots()) {
        if (s.stage != index || !s.steps) continue;
        return static_cast<int64_t>(s.steps->lanes.count) - static_cast<int64_t>(s.steps->lanes.bucket_counts.at(0));
    }
    return -1;
}

class batch_exactness : public ::testing::TestWithParam<int32_t> {};

TEST_P(batch_exactness, EveryRequestEqualsItsSoloRun) {
    const int32_t n_stages = GetParam();
    auto file = model();
    ASSERT_NE(file, nullptr);
    const auto requests = random_requests(150, 1000 + static_cast<uint32_t>(n_stages));
    // Solo: one lane, no cache, one stage, one request after the other.
    cache_run_options solo_options;
    solo_options.cache_on = false;
    solo_options.ctx = 128;
    auto solo = cached_chain(file, solo_options);
    ASSERT_NE(solo, nullptr);
    std::vector<std::vector<token_id>> want;
    for (const auto & r : requests) want.push_back(run_tokens(*solo, 0, r.req));

    cache_run_options o;
    o.n_stages = n_stages;
    o.lanes = 4;
    o.ctx = 128;
    auto chain = cached_chain(file, o);
    ASSERT_NE(chain, nullptr);
    std::vector<std::vector<token_id>> got(requests.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> lanes;
    for (int32_t lane = 0; lane < o.lanes; ++lane) {
        lanes.emplace_back([&, lane] {
            for (size_t i = next++; i < requests.size(); i = next++) {
                std::this_thread::sleep_for(std::chrono::microseconds(requests[i].delay_us));
                got[i] = run_tokens(*chain, lane, requests[i].req);
            }
        });
    }
    for (auto & t : lanes) t.join();
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(got[i], want[i]) << "request " << i << " (prompt " << requests[i].req.prompt.size() << " tokens, chunk "
                                   << requests[i].req.prefill_chunk_tokens << ")";
    }
    for (int32_t s = 0; s < n_stages; ++s) {
        EXPECT_GT(multi_lane_steps(*chain, s), 0) << "stage " << s << " never ran a step of several lanes";
    }
}

INSTANTIATE_TEST_SUITE_P(stages, batch_exactness, ::testing::Values(1, 2, 3));

// A lane whose client goes away mid-stream stops; the lanes decoding beside it keep
// their exact tokens, and the next request on the cancelled lane is exact too.
TEST(batch_faults, ACancelledLaneLeavesTheOthersExact) {
    auto file = model();
    for (int32_t n_stages : {1, 3}) {
        SCOPED_TRACE(std::to_string(n_stages) + " stages");
        cache_run_options solo_options;
        solo_options.cache_on = false;
        solo_options.ctx = 128;
        auto solo = cached_chain(file, solo_options);
        cache_run_options o;
        o.n_stages = n_stages;
        o.lanes = 3;
        o.ctx = 128;
        auto chain = cached_chain(file, o);
        ASSERT_TRUE(solo && chain);
        std::vector<generation_request> reqs(3);
        for (int i = 0; i < 3; ++i) {
            reqs[static_cast<size_t>(i)].prompt = tokens_of(10 + 7 * i, 20 + i);
            reqs[static_cast<size_t>(i)].max_tokens = 30;
            reqs[static_cast<size_t>(i)].sampling.temperature = 0;
        }
        std::vector<std::vector<token_id>> want;
        for (const auto & r : reqs) want.push_back(run_tokens(*solo, 0, r));
        std::vector<std::vector<token_id>> got(3);
        std::vector<std::thread> threads;
        for (int lane = 0; lane < 3; ++lane) {
            threads.emplace_back([&, lane] {
                generation_request r = reqs[static_cast<size_t>(lane)];
                int seen = 0;
                if (lane == 1) r.on_token = [&](token_id) { return ++seen < 5; };  // the client leaves
                got[static_cast<size_t>(lane)] = run_tokens(*chain, lane, r);
            });
        }
        for (auto & t : threads) t.join();
        EXPECT_EQ(got[0], want[0]);
        EXPECT_EQ(got[2], want[2]);
        EXPECT_EQ(got[1], std::vector<token_id>(want[1].begin(), want[1].begin() + 5));
        EXPECT_EQ(run_tokens(*chain, 1, reqs[1]), want[1]) << "the cancelled lane serves its next request exactly";
    }
}

// A chain whose final stage has a smaller context than the others: a request that
// outgrows it fails there, mid-step, with that stage's reason; the lanes in the same
// steps finish exactly; the failed lane's next request is exact.
TEST(batch_faults, ALaneFailingMidStepFailsAloneWithItsReason) {
    auto file = model();
    auto hp = model_hparams::from_gguf(*file);
    ASSERT_TRUE(hp.is_ok());
    const int32_t n_stages = 3;
    auto topo = transport::even_split(file->path(), hp->n_layer, n_stages, "127.0.0.1", 1);
    ASSERT_TRUE(topo.is_ok());
    std::vector<transport::tcp_listener> listeners;
    for (auto & st : topo->stages) {
        st.address.port = 0;
        auto l = transport::tcp_listener::listen(st.address);
        ASSERT_TRUE(l.is_ok());
        st.address.port = l->port();
        listeners.push_back(std::move(l).value());
    }
    std::vector<std::unique_ptr<transport::stage_server>> servers;
    for (int32_t i = 1; i < n_stages; ++i) {
        stage_options so;
        so.n_threads = 1;
        so.n_lanes = 3;
        so.ctx_size = i == n_stages - 1 ? 40 : 128;
        so.layers = topo->stages[static_cast<size_t>(i)].layers;
        auto st = stage::load(file, so);
        ASSERT_TRUE(st.is_ok());
        servers.push_back(std::make_unique<transport::stage_server>(std::move(st).value(), nullptr, i, *topo,
                                                                    std::move(listeners[static_cast<size_t>(i)]), transport::chain_options{}));
        servers.back()->start();
    }
    stage_options so;
    so.n_threads = 1;
    so.n_lanes = 3;
    so.ctx_size = 128;
    so.layers = topo->stages[0].layers;
    auto s0 = stage::load(file, so);
    ASSERT_TRUE(s0.is_ok());
    transport::chain_pipeline chain(std::move(s0).value(), nullptr, *topo, std::move(listeners[0]), transport::chain_options{});

    cache_run_options solo_options;
    solo_options.cache_on = false;
    solo_options.ctx = 128;
    auto solo = cached_chain(file, solo_options);
    ASSERT_NE(solo, nullptr);
    generation_request too_long;
    too_long.prompt = tokens_of(30, 3);
    too_long.max_tokens = 30;  // passes position 40 on the final stage
    too_long.sampling.temperature = 0;
    std::vector<generation_request> fine(2);
    for (int i = 0; i < 2; ++i) {
        fine[static_cast<size_t>(i)].prompt = tokens_of(8 + i, 4 + i);
        fine[static_cast<size_t>(i)].max_tokens = 20;
        fine[static_cast<size_t>(i)].sampling.temperature = 0;
    }
    std::vector<std::vector<token_id>> want;
    for (const auto & r : fine) want.push_back(run_tokens(*solo, 0, r));

    std::vector<std::vector<token_id>> got(2);
    status failed;
    std::vector<std::thread> threads;
    threads.emplace_back([&] {
        auto res = run_generation(chain, 0, too_long);
        failed = res.is_ok() ? status::ok() : res.error();
    });
    for (int i = 0; i < 2; ++i) threads.emplace_back([&, i] { got[static_cast<size_t>(i)] = run_tokens(chain, i + 1, fine[static_cast<size_t>(i)]); });
    for (auto & t : threads) t.join();
    ASSERT_FALSE(failed.is_ok()) << "the request outgrew the final stage's context and still succeeded";
    EXPECT_NE(failed.message().find("stage 2"), std::string::npos) << failed.to_string();
    EXPECT_NE(failed.message().find("context"), std::string::npos) << failed.to_string();
    EXPECT_EQ(got[0], want[0]);
    EXPECT_EQ(got[1], want[1]);
    EXPECT_EQ(run_tokens(chain, 0, fine[0]), want[0]) << "the failed lane is rebuilt for its next request";
}

}  // namespace
}  // namespace skippy::testing
