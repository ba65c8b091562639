// The prefix cache over real chains (DESIGN §6): with the cache on, every output equals
// the cache-off output token for token, on 1, 2 and 3 stages; cached_tokens is the
// restored prefix; a chain hit sets every stage's bit. The recovery paths of
// docs/kv-cache.md §10 (rollback after a miss below, TrimSession(0) undo, the deferred
// decode restore's fallback, in-band hits on servers, RestorePrefill) each forced.
#include "../model/model_fixture.h"
#include "cache_fixture.h"
#include "transport/convert.h"

#include <set>
#include <thread>

namespace skippy::testing {
namespace {

std::shared_ptr<const gguf::file> model(const char * arch, const char * type) {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 256; o.n_layer = 3; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 512; o.n_vocab = 300; o.type = type;
    return synthetic_model(o);
}

struct cache_case {
    const char * name;
    const char * arch;
    const char * type;
    int32_t      n_stages;
};

class cache_exactness : public ::testing::TestWithParam<cache_case> {};

TEST_P(cache_exactness, CacheOnEqualsCacheOffAndReportsRestoredPrefixes) {
    const auto & c = GetParam();
    auto file = model(c.arch, c.type);
    ASSERT_NE(file, nullptr);
    cache_run_options off;
    off.n_stages = c.n_stages;
    off.cache_on = false;
    auto cold = cached_chain(file, off);
    cache_run_options on = off;
    on.cache_on = true;
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    expect_scenario_exact(*cold, *warm, c.n_stages);
}

INSTANTIATE_TEST_SUITE_P(chains, cache_exactness,
                         ::testing::Values(cache_case{"llama_q4_k_m_1", "llama", "Q4_K_M", 1},
                                           cache_case{"llama_q4_k_m_2", "llama", "Q4_K_M", 2},
                                           cache_case{"llama_q4_k_m_3", "llama", "Q4_K_M", 3},
                                           cache_case{"qwen2_q8_0_1", "qwen2", "Q8_0", 1},
                                           cache_case{"qwen2_q8_0_2", "qwen2", "Q8_0", 2},
                                           cache_case{"qwen2_q8_0_3", "qwen2", "Q8_0", 3}),
                         [](const auto & param_info) { return std::string(param_info.param.name); });

class cache_pressure : public ::testing::TestWithParam<int32_t> {};

// Many prompts through a tiny pool and one resident entry: entries are evicted and
// demoted to the exact-state tier, later restored from it, and outputs stay exact.
TEST_P(cache_pressure, EvictionAndExactStateHitsStayExact) {
    const int32_t n_stages = GetParam();
    auto file = model("llama", "Q8_0");
    const cache_run_options on = pressure_options(n_stages, true);
    auto cold = cached_chain(file, pressure_options(n_stages, false));
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    expect_pressure_exact(*cold, *warm, n_stages);
    // Probes name a tier too; only restores that put tokens into a session count.
    EXPECT_GT(on.sink->count_restores_from("exact_state"), 0) << "no restore came from the exact-state tier";
}

INSTANTIATE_TEST_SUITE_P(stages, cache_pressure, ::testing::Values(1, 2, 3));

// A flipped byte in a stored exact-state block: detected, the entry quarantined, the
// error counted, and the answer still the cache-off answer.
TEST(cache_corruption, FlippedExactStateByteIsQuarantinedAndTheAnswerStaysCorrect) {
    auto file = model("qwen2", "Q4_K_M");
    cache_run_options off;
    off.cache_on = false;
    cache_run_options on;
    on.max_entries = 0;  // resident tier off: restores come from serialized pages
    auto cold = cached_chain(file, off);
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    const auto prompt = tokens_of(80, 5);
    const auto want = run_turn(*cold, prompt, 8);
    ASSERT_EQ(run_turn(*warm, prompt, 8).tokens, want.tokens);
    wait_for_records(*warm);
    auto & store = warm->cache_host()->cache()->exact_store_for_testing();
    const auto entries = store.entries_for_testing();
    ASSERT_FALSE(entries.empty());
    // Blobs are content-addressed: the prompt's entry and the prompt+answer entry recorded
    // at Stop (when it reached this tier) share their first blob, and a second flip of the
    // same byte would undo the first. Flip each distinct blob once.
    std::set<cache::blob_id> flipped;
    for (auto e : entries) {
        const auto blobs = store.blobs_for_testing(e);
        ASSERT_FALSE(blobs.empty());
        if (flipped.insert(blobs.front()).second) {
            ASSERT_TRUE(store.corrupt_for_testing(blobs.front(), 100));
        }
    }
    const auto got = run_turn(*warm, prompt, 8);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.cached, 0);
    EXPECT_GE(got.stats.kv_lookup_errors, 1u);
    EXPECT_GE(warm->cache_host()->cache()->stats().n_quarantines, 1);
    wait_for_records(*warm);
    const auto again = run_turn(*warm, prompt, 8);  // recorded afresh after the quarantine
    EXPECT_EQ(again.tokens, want.tokens);
    EXPECT_EQ(again.cached, 79);
}

// A full-prompt hit normally rides on the first decode; a request for no tokens has no
// decode, so the restore happens at once and cached_tokens counts what was restored.
TEST(cache_zero_tokens, AFullHitWithoutDecodeIsRestoredAndCounted) {
    auto file = model("llama", "Q8_0");
    for (int32_t n_stages : {1, 2, 3}) {
        cache_run_options on;
        on.n_stages = n_stages;
        auto p = cached_chain(file, on);
        ASSERT_NE(p, nullptr);
        const auto prompt = tokens_of(40, 4);
        generation_request req;
        req.prompt = prompt;
        req.max_tokens = 0;
        req.sampling.temperature = 0;
        auto first = run_generation(*p, 0, req);
        ASSERT_TRUE(first.is_ok()) << first.error().to_string();
        EXPECT_EQ(first->cached_tokens, 0);
        // No token came back to carry the stages' counters: the Stop ack did.
        const uint64_t all_stages = (uint64_t(1) << n_stages) - 1;
        EXPECT_EQ(p->last_stats(0).kv_record_stage_mask, all_stages) << n_stages << " stages";
        EXPECT_EQ(p->last_stats(0).kv_recorded_pages, static_cast<uint64_t>(n_stages)) << n_stages << " stages";
        wait_for_records(*p);
        auto second = run_generation(*p, 0, req);
        ASSERT_TRUE(second.is_ok()) << second.error().to_string();
        EXPECT_EQ(second->cached_tokens, 39) << n_stages << " stages";
        EXPECT_TRUE(second->tokens.empty());
        EXPECT_EQ(p->last_stats(0).kv_hit_stage_mask, all_stages) << n_stages << " stages";
    }
}

// ---------------------------------------------------------------------------------
// The chain's recovery paths (docs/kv-cache.md §10), each forced by dropping one
// stage's entries at a chosen moment. Every run must equal the cache-off run token for
// token, and cached_tokens must be what stage 0 restored for the chain (0 whenever the
// chain restore was abandoned).

struct path_chains {
    std::unique_ptr<transport::chain_pipeline> cold, warm;
    std::shared_ptr<memory_sink>               sink = std::make_shared<memory_sink>();
};

path_chains make_path_chains(int32_t n_stages, int32_t lanes = 1) {
    path_chains c;
    auto file = model("llama", "Q8_0");
    cache_run_options off;
    off.n_stages = n_stages;
    off.cache_on = false;
    off.lanes = lanes;
    cache_run_options on = off;
    on.cache_on = true;
    on.sink = c.sink;
    c.cold = cached_chain(file, off);
    c.warm = cached_chain(file, on);
    return c;
}

// Runs the prompt on both chains: the outputs must be equal.
turn_result run_both(path_chains & c, const std::vector<token_id> & prompt, int32_t chunk = 16) {
    const auto want = run_turn(*c.cold, prompt, 8, chunk);
    const auto got = run_turn(*c.warm, prompt, 8, chunk);
    EXPECT_EQ(got.tokens, want.tokens) << "the cache changed the output";
    EXPECT_EQ(want.cached, 0);
    return got;
}

// Ready for the next turn: records stored, no hook, no events.
void settle(path_chains & c) {
    wait_for_records(*c.warm);
    c.sink->set_hook(nullptr);
    c.sink->clear();
}

std::vector<token_id> shared_then_new(const std::vector<token_id> & base, size_t shared) {
    return concat(std::vector<token_id>(base.begin(), base.begin() + static_cast<ptrdiff_t>(shared)), tokens_of(12, 7));
}

class cache_paths : public ::testing::TestWithParam<int32_t> {};

// A stage below stage 0 answered the probe, then lost its entry: TryRestorePrefill
// misses there, every stage above it that restored rolls back, the stages below it are
// never asked, stage 0 (which restored while the request travelled) rolls back too and
// the prompt is computed (in-band lookups still serve what they can).
void expect_try_restore_miss_below(int32_t n_stages, int32_t victim) {
    SCOPED_TRACE("stages " + std::to_string(n_stages) + ", victim " + std::to_string(victim));
    const int32_t last = n_stages - 1;
    auto c = make_path_chains(n_stages);
    ASSERT_TRUE(c.cold && c.warm);
    const auto base = tokens_of(60, 1);
    run_both(c, base);
    settle(c);
    forget_at_event(*c.sink, *c.warm, victim, "probe_");
    const auto got = run_both(c, shared_then_new(base, 45));
    EXPECT_EQ(got.cached, 0) << "the chain restore was abandoned";
    EXPECT_EQ(c.sink->count_decision(0, "probe_short"), 1) << "45 of the 56 restorable tokens";
    // Stage 0 restores while the request travels, then rolls back on the chain's miss
    // (the prompt below is computed from 0 on every stage, stage 0 included).
    EXPECT_EQ(c.sink->count_decision(0, "try_restore_hit"), 1) << "stage 0 restored, then rolled back";
    for (int32_t s = 1; s < victim; ++s) {
        EXPECT_EQ(c.sink->count_decision(s, "try_restore_hit"), 1) << "stage " << s << " restored, then rolled back";
    }
    EXPECT_EQ(c.sink->count_decision(victim, "try_restore_miss"), 1);
    for (int32_t s = victim + 1; s < n_stages; ++s) {
        EXPECT_EQ(c.sink->count_decisions_starting(s, "try_restore"), 0) << "stage " << s << " was never asked";
    }
    // Computed from position 0: the first chunk is looked up in-band on every stage;
    // only the victim lacks its KV.
    for (int32_t s = 0; s < last; ++s) {
        EXPECT_EQ(c.sink->count_decision(s, s == victim ? "activation_hit_kv_miss" : "activation_resident_hit"), 1) << "stage " << s;
    }
    EXPECT_EQ(c.sink->count_decision(last, victim == last ? "resident_miss" : "resident_hit"), 1);
    // The victim recorded the prompt again: the next repeat is a chain hit.
    settle(c);
    const auto again = run_both(c, shared_then_new(base, 45));
    EXPECT_EQ(again.cached, 56);
    EXPECT_EQ(again.stats.kv_hit_stage_mask, (uint64_t(1) << n_stages) - 1);
}

TEST_P(cache_paths, TryRestoreMissBelowRollsBackAndComputes) {
    const int32_t n_stages = GetParam();
    for (int32_t victim = 1; victim < n_stages; ++victim) expect_try_restore_miss_below(n_stages, victim);
}

// Stage 0's own entry went away between its probe and its restore: the stages below
// already restored, so stage 0 undoes them with TrimSession(0) and computes.
TEST_P(cache_paths, Stage0MissAfterAChainHitTrimsTheOthers) {
    const int32_t n_stages = GetParam();
    auto c = make_path_chains(n_stages);
    ASSERT_TRUE(c.cold && c.warm);
    const auto base = tokens_of(60, 1);
    run_both(c, base);
    settle(c);
    forget_at_event(*c.sink, *c.warm, 0, "probe_");
    const auto got = run_both(c, shared_then_new(base, 45));
    EXPECT_EQ(got.cached, 0);
    for (int32_t s = 1; s < n_stages; ++s) EXPECT_EQ(c.sink->count_decision(s, "try_restore_hit"), 1) << "stage " << s;
    EXPECT_EQ(c.sink->count_decision(0, "try_restore_miss"), 1);
    // The prompt was computed from 0: stage 0 found its first chunk's frame but no KV.
    EXPECT_EQ(c.sink->count_decision(0, "activation_hit_kv_miss"), 1);
    settle(c);
    const auto again = run_both(c, shared_then_new(base, 45));
    EXPECT_EQ(again.cached, 56);
    EXPECT_EQ(again.stats.kv_hit_stage_mask, (uint64_t(1) << n_stages) - 1);
}

// A full-prompt hit rides on the first decode (TryRestorePrefillDecode). When stage
// `victim` lost its entry after the probe, that stage misses, the stages before it roll
// back, and stage 0 computes the whole prompt before decoding.
void expect_decode_restore_fallback(int32_t n_stages, int32_t victim) {
    SCOPED_TRACE("stages " + std::to_string(n_stages) + ", victim " + std::to_string(victim));
    auto c = make_path_chains(n_stages);
    ASSERT_TRUE(c.cold && c.warm);
    const auto base = tokens_of(60, 1);
    run_both(c, base);
    settle(c);
    forget_at_event(*c.sink, *c.warm, victim, "probe_");
    const auto got = run_both(c, base);
    EXPECT_EQ(got.cached, 0) << "the deferred restore missed and the prompt was computed";
    for (int32_t s = 0; s < victim; ++s) {
        EXPECT_EQ(c.sink->count_decision(s, "try_restore_decode_hit"), 1) << "stage " << s << " restored, then rolled back";
    }
    EXPECT_EQ(c.sink->count_decision(victim, "try_restore_decode_miss"), 1);
    for (int32_t s = victim + 1; s < n_stages; ++s) {
        EXPECT_EQ(c.sink->count_decisions_starting(s, "try_restore_decode"), 0) << "stage " << s << " was never asked";
    }
    // The fallback prefilled positions [0, 59) in one chunk: recorded again, so the next
    // repeat is a full hit.
    settle(c);
    const auto again = run_both(c, base);
    EXPECT_EQ(again.cached, 59);
    EXPECT_EQ(again.stats.kv_hit_stage_mask, (uint64_t(1) << n_stages) - 1);
    EXPECT_EQ(again.stats.kv_lookup_hits, static_cast<uint64_t>(n_stages)) << "one restore per stage, counted once";
    EXPECT_EQ(again.stats.kv_imported_tokens, 59u * static_cast<uint64_t>(n_stages));
    EXPECT_EQ(c.sink->count_decision(n_stages - 1, "try_restore_decode_hit"), 1);
}

TEST_P(cache_paths, DeferredDecodeRestoreMissFallsBackToAFullPrefill) {
    const int32_t n_stages = GetParam();
    for (int32_t victim = 0; victim < n_stages; ++victim) expect_decode_restore_fallback(n_stages, victim);
}

// Nothing restored for the chain (stage 0 lost everything): the Prefill at position 0
// is looked up in-band. A non-final server holding the frame it forwarded for the chunk
// and its KV skips the compute and forwards the frame; the final stage restores the
// chunk.
TEST_P(cache_paths, InBandActivationHitOnAServerSkipsTheChunk) {
    const int32_t n_stages = GetParam();
    const int32_t last = n_stages - 1;
    auto c = make_path_chains(n_stages);
    ASSERT_TRUE(c.cold && c.warm);
    const auto base = tokens_of(60, 1);
    run_both(c, base);
    settle(c);
    forget_entries(*stage_cache_of(*c.warm, 0));
    const auto got = run_both(c, base);
    EXPECT_EQ(got.cached, 0) << "stage 0 restored nothing";
    EXPECT_EQ(c.sink->count_decision(0, "probe_miss"), 1);
    EXPECT_EQ(c.sink->count_decision(0, "activation_hit_kv_miss"), 1);
    for (int32_t s = 1; s < last; ++s) {
        EXPECT_EQ(c.sink->count_decision(s, "activation_resident_hit"), 1) << "stage " << s;
        EXPECT_EQ(c.sink->first_int(s, "activation_resident_hit", "skippy.kv.restored_tokens"), 16);
    }
    EXPECT_EQ(c.sink->count_decision(last, "resident_hit"), 1);
    EXPECT_EQ(c.sink->first_int(last, "resident_hit", "skippy.kv.restored_tokens"), 16) << "the whole first chunk";
    EXPECT_NE(got.stats.kv_hit_stage_mask & (uint64_t(1) << last), 0u);
    EXPECT_EQ(got.stats.kv_hit_stage_mask & 1u, 0u) << "stage 0 restored nothing";
}

// The final stage's in-band lookup serves part of a chunk: it restores the longest
// prefix it has and computes only the rest of the chunk.
TEST_P(cache_paths, FinalStageRestoresPartOfAChunkAndComputesTheRest) {
    const int32_t n_stages = GetParam();
    const int32_t last = n_stages - 1;
    auto c = make_path_chains(n_stages);
    ASSERT_TRUE(c.cold && c.warm);
    const auto base = tokens_of(60, 1);
    run_both(c, base, 512);
    settle(c);
    forget_entries(*stage_cache_of(*c.warm, 0));
    const auto longer = concat(base, tokens_of(11, 8));  // 71 tokens: one chunk of 70
    const auto got = run_both(c, longer, 512);
    EXPECT_EQ(got.cached, 0);
    EXPECT_EQ(c.sink->count_decision(last, "resident_hit"), 1);
    EXPECT_EQ(c.sink->first_int(last, "resident_hit", "skippy.kv.query_tokens"), 70);
    // The recorded prefix, not the chunk: all of base, whose last token ran through
    // decode and was recorded at Stop with the answer.
    EXPECT_EQ(c.sink->first_int(last, "resident_hit", "skippy.kv.restored_tokens"), 60) << "the recorded prefix, not the chunk";
    EXPECT_EQ(got.stats.kv_hit_stage_mask & (uint64_t(1) << last), uint64_t(1) << last);
    EXPECT_GE(got.stats.kv_imported_tokens, 59u);
    // It recorded the whole prompt it now holds, partly restored and partly computed.
    settle(c);
    const auto again = run_both(c, longer, 512);
    EXPECT_EQ(again.stats.kv_hit_stage_mask & (uint64_t(1) << last), uint64_t(1) << last);
    EXPECT_EQ(c.sink->count_decision(last, "try_restore_decode_miss") + c.sink->count_decision(last, "try_restore_miss"), 0);
}

INSTANTIATE_TEST_SUITE_P(stages, cache_paths, ::testing::Values(2, 3));

// ---------------------------------------------------------------------------------
// RestorePrefill. Stage 0 never sends it (chain.cpp restores with TryRestorePrefill and
// TryRestorePrefillDecode only), so the test plays stage 0 itself: it runs stage 0's
// layers, talks the protocol to real stage servers 1..k, and takes the final stage's
// tokens on its own return listener.

class raw_stage0 {
public:
    // Starts servers 1..n_stages-1 (cache on, events to `sink`) and dials stage 1.
    void open(std::shared_ptr<const gguf::file> file, int32_t n_stages, std::shared_ptr<memory_sink> sink) {
        file_ = std::move(file);
        auto hp = model_hparams::from_gguf(*file_);
        ASSERT_TRUE(hp.is_ok());
        auto topo = transport::even_split(file_->path(), hp->n_layer, n_stages, "127.0.0.1", 1);
        ASSERT_TRUE(topo.is_ok());
        topo_ = *topo;
        std::vector<transport::tcp_listener> listeners;
        for (auto & st : topo_.stages) {
            st.address.port = 0;
            auto l = transport::tcp_listener::listen(st.address);
            ASSERT_TRUE(l.is_ok());
            st.address.port = l->port();
            listeners.push_back(std::move(l).value());
        }
        return_listener_ = std::move(listeners[0]);
        stage_options so;
        so.n_threads = 1;
        so.ctx_size = 512;
        transport::chain_options co;
        co.cache.config.min_tokens = 8;
        co.cache.sink = std::move(sink);
        for (int32_t i = 1; i < n_stages; ++i) {
            const layer_range layers = topo_.stages[static_cast<size_t>(i)].layers;
            auto st = stage::load(file_, transport::stage_options_for(so, layers, co.cache));
            ASSERT_TRUE(st.is_ok());
            auto host = transport::stage_cache_host::create(**st, *file_, i, co.cache);
            ASSERT_TRUE(host.is_ok());
            servers_.push_back(std::make_unique<transport::stage_server>(std::move(st).value(), std::move(host).value(), i, topo_,
                                                                         std::move(listeners[static_cast<size_t>(i)]), co));
            servers_.back()->start();
        }
        so.layers = topo_.stages[0].layers;
        auto s0 = stage::load(file_, so);
        ASSERT_TRUE(s0.is_ok());
        stage0_ = std::move(s0).value();
        protocol::hello h;
        h.link = protocol::link_kind::forward;
        auto fwd = transport::connect_link(topo_.stages[1].address, h, {}, "stage 1");
        ASSERT_TRUE(fwd.is_ok()) << fwd.error().to_string();
        forward_ = std::move(fwd).value();
    }

    transport::stage_server & server(int32_t index) { return *servers_[static_cast<size_t>(index - 1)]; }

    // ConfigureGeneration for a prompt of n tokens (greedy, cache on). The first one
    // also takes the final stage's return link, which it dials before acking.
    void configure(int64_t n_prompt) {
        std::thread returns;
        if (!returns_.connected()) returns = std::thread([this] { accept_return_link(); });
        protocol::request r = request(protocol::message_kind::configure_generation, 0, n_prompt);
        protocol::generation_config gc;
        sampling_config sc;
        sc.temperature = 0;
        gc.sampling = transport::to_sampling_params(sc);
        gc.cache_mode = transport::to_prompt_cache_mode(cache::cache_mode::lookup_record);
        gc.cache_min_tokens = 8;
        r.generation = gc;
        const protocol::reply ack = roundtrip(r);
        if (returns.joinable()) returns.join();
        EXPECT_EQ(ack.kind, protocol::message_kind::ack);
        ASSERT_TRUE(returns_.connected()) << "no return link from the final stage";
    }

    protocol::reply restore_prefill(const std::vector<token_id> & prefix, int64_t n_prompt) {
        protocol::request r = request(protocol::message_kind::restore_prefill, 0, n_prompt);
        r.tokens.assign(prefix.begin(), prefix.end());
        return roundtrip(r);
    }

    // Prefills prompt[from, n - 1) on the servers (stage 0 computes all of [0, n - 1)
    // itself: it caches nothing), then decodes n_out tokens greedily.
    std::vector<token_id> generate(const std::vector<token_id> & prompt, int64_t from, int32_t n_out) {
        const int64_t n = static_cast<int64_t>(prompt.size());
        const int32_t n_embd = stage0_->hparams().n_embd;
        stage0_->truncate_lane(0, 0);
        std::vector<float> hidden(static_cast<size_t>((n - 1) * n_embd));
        EXPECT_TRUE(stage0_->forward(0, 0, std::span<const token_id>(prompt).first(static_cast<size_t>(n - 1)), {}, n - 1, hidden).is_ok());
        if (from < n - 1) {
            protocol::request r = request(protocol::message_kind::prefill, from, n);
            r.state.phase = protocol::message_phase::prefill;
            r.tokens.assign(prompt.begin() + from, prompt.end() - 1);
            r.activation = frame(std::vector<float>(hidden.begin() + from * n_embd, hidden.end()));
            EXPECT_TRUE(forward_.send_request(r).is_ok());
            auto ack = forward_.read_reply(transport::clock::now() + std::chrono::seconds(30));
            EXPECT_TRUE(ack.is_ok() && ack->kind == protocol::message_kind::ack) << "prefill not acked";
        }
        std::vector<token_id> out;
        token_id current = prompt.back();
        std::vector<float> row(static_cast<size_t>(n_embd));
        for (int32_t i = 0; i < n_out; ++i) {
            const int64_t pos = n - 1 + i;
            EXPECT_TRUE(stage0_->forward(0, pos, std::span<const token_id>(&current, 1), {}, 1, row).is_ok());
            protocol::request r = request(protocol::message_kind::decode, pos, n);
            r.state.phase = protocol::message_phase::decode;
            r.state.current_token = current;
            r.state.decode_step = static_cast<uint32_t>(i);
            r.tokens = {current};
            r.activation = frame(row);
            EXPECT_TRUE(forward_.send_request(r).is_ok());
            auto ack = forward_.read_reply(transport::clock::now() + std::chrono::seconds(30));
            EXPECT_TRUE(ack.is_ok() && ack->kind == protocol::message_kind::ack) << "decode not acked";
            auto tok = returns_.read_reply(transport::clock::now() + std::chrono::seconds(30));
            EXPECT_TRUE(tok.is_ok() && tok->kind == protocol::message_kind::predicted_token) << "no token returned";
            if (!tok.is_ok() || tok->kind != protocol::message_kind::predicted_token) break;
            current = tok->token;
            out.push_back(current);
        }
        return out;
    }

    void stop() {
        roundtrip(request(protocol::message_kind::stop, 0, 0));
        for (auto & s : servers_) s->cache_host()->cache()->wait_for_records();
    }

private:
    protocol::request request(protocol::message_kind kind, int64_t pos, int64_t n_prompt) {
        protocol::request r;
        r.kind = kind;
        r.request_id = next_id_++;
        r.pos_start = pos;
        r.state.phase = protocol::message_phase::control;
        r.state.prompt_token_count = static_cast<uint32_t>(n_prompt);
        return r;
    }
    protocol::activation_frame frame(std::vector<float> values) const {
        protocol::activation_frame f;
        f.layer_start = static_cast<uint32_t>(stage0_->slice().range().start);
        f.layer_end = static_cast<uint32_t>(stage0_->slice().range().end);
        f.n_embd = static_cast<uint32_t>(stage0_->hparams().n_embd);
        f.values = std::move(values);
        return f;
    }
    protocol::reply roundtrip(const protocol::request & r) {
        EXPECT_TRUE(forward_.send_request(r).is_ok());
        auto reply = forward_.read_reply(transport::clock::now() + std::chrono::seconds(30));
        EXPECT_TRUE(reply.is_ok()) << reply.error().to_string();
        if (!reply.is_ok()) return {};
        EXPECT_EQ(reply->request_id, r.request_id);
        return *reply;
    }
    void accept_return_link() {
        auto s = return_listener_.accept(std::chrono::seconds(10));
        ASSERT_TRUE(s.is_ok()) << s.error().to_string();
        auto h = transport::answer_hello(*s, {}, [](const protocol::hello &) { return status::ok(); });
        ASSERT_TRUE(h.is_ok()) << h.error().to_string();
        transport::stage_link link(std::move(s).value(), {}, "final stage (return)");
        auto open = link.read_request(transport::clock::now() + std::chrono::seconds(30));
        ASSERT_TRUE(open.is_ok() && open->kind == protocol::message_kind::prediction_return_open);
        returns_ = std::move(link);
    }

    std::shared_ptr<const gguf::file>                    file_;
    transport::topology                                  topo_;
    transport::tcp_listener                              return_listener_;
    std::vector<std::unique_ptr<transport::stage_server>> servers_;
    std::unique_ptr<stage>                               stage0_;
    transport::stage_link                                forward_, returns_;
    uint64_t                                             next_id_ = 1;
};

class cache_restore_prefill : public ::testing::TestWithParam<int32_t> {};

// RestorePrefill of a cached prefix restores it on every server (all of it, each stage
// answering restore_hit), the rest is prefilled from there, and the tokens equal the
// cache-off chain's. A prefix nobody holds, or one longer than what is cached, restores
// nothing anywhere, and computing from 0 is still exact.
TEST_P(cache_restore_prefill, RestoresAPrefixOnEveryServer) {
    const int32_t n_stages = GetParam();
    auto file = model("llama", "Q8_0");
    cache_run_options off;
    off.n_stages = n_stages;
    off.cache_on = false;
    auto cold = cached_chain(file, off);
    ASSERT_NE(cold, nullptr);
    auto sink = std::make_shared<memory_sink>();
    raw_stage0 raw;
    raw.open(file, n_stages, sink);
    if (::testing::Test::HasFatalFailure()) return;

    const auto base = tokens_of(60, 1);
    raw.configure(60);
    EXPECT_EQ(raw.generate(base, 0, 6), run_turn(*cold, base, 6).tokens);
    raw.stop();
    sink->clear();

    uint64_t servers_mask = 0;
    for (int32_t s = 1; s < n_stages; ++s) servers_mask |= uint64_t(1) << s;
    const auto next = shared_then_new(base, 45);
    raw.configure(static_cast<int64_t>(next.size()));
    const auto ack = raw.restore_prefill(std::vector<token_id>(next.begin(), next.begin() + 45), static_cast<int64_t>(next.size()));
    EXPECT_EQ(ack.kind, protocol::message_kind::ack);
    EXPECT_EQ(ack.outcome, protocol::ack_outcome::hit);
    EXPECT_EQ(ack.restored_tokens, 45);
    EXPECT_EQ(ack.stats.kv_hit_stage_mask, servers_mask);
    EXPECT_EQ(ack.stats.kv_imported_tokens, uint64_t(45) * static_cast<uint64_t>(n_stages - 1));
    for (int32_t s = 1; s < n_stages; ++s) {
        EXPECT_EQ(sink->count_decision(s, "restore_hit"), 1) << "stage " << s;
        EXPECT_EQ(sink->first_int(s, "restore_hit", "skippy.kv.restored_tokens"), 45) << "stage " << s;
    }
    EXPECT_EQ(raw.generate(next, 45, 6), run_turn(*cold, next, 6).tokens) << "restored 45, computed the rest";
    raw.stop();
    sink->clear();

    // Nobody holds it: every stage misses (RestorePrefill forwards a miss too), nothing
    // restored; computed from 0.
    const auto other = tokens_of(50, 77);
    raw.configure(50);
    const auto miss = raw.restore_prefill(std::vector<token_id>(other.begin(), other.begin() + 40), 50);
    EXPECT_NE(miss.outcome, protocol::ack_outcome::hit);
    EXPECT_EQ(miss.restored_tokens, 0);
    EXPECT_EQ(miss.stats.kv_hit_stage_mask, 0u);
    for (int32_t s = 1; s < n_stages; ++s) EXPECT_EQ(sink->count_decision(s, "restore_miss"), 1) << "stage " << s;
    EXPECT_EQ(raw.generate(other, 0, 6), run_turn(*cold, other, 6).tokens);
    raw.stop();
    sink->clear();

    // Longer than any entry (45 shared + 10 new): all or nothing, so nothing.
    const auto longer = concat(std::vector<token_id>(base.begin(), base.begin() + 45), tokens_of(15, 5));
    raw.configure(static_cast<int64_t>(longer.size()));
    const auto short_ack = raw.restore_prefill(std::vector<token_id>(longer.begin(), longer.begin() + 55), static_cast<int64_t>(longer.size()));
    EXPECT_NE(short_ack.outcome, protocol::ack_outcome::hit);
    EXPECT_EQ(short_ack.restored_tokens, 0);
    for (int32_t s = 1; s < n_stages; ++s) EXPECT_EQ(sink->count_decision(s, "restore_short"), 1) << "stage " << s;
    EXPECT_EQ(raw.generate(longer, 0, 6), run_turn(*cold, longer, 6).tokens);
    raw.stop();
}

INSTANTIATE_TEST_SUITE_P(stages, cache_restore_prefill, ::testing::Values(2, 3));

// Counters merge hop by hop: a cold request records two resident pages on every stage
// (the prompt after its final chunk, prompt + answer at Stop), each counted once
// (stage 0's own counters once, not again via the reply).
TEST(cache_stats, EveryStageCountsItsRecordOnce) {
    auto file = model("llama", "Q8_0");
    for (int32_t n_stages : {1, 2, 3}) {
        cache_run_options on;
        on.n_stages = n_stages;
        auto p = cached_chain(file, on);
        ASSERT_NE(p, nullptr);
        const auto cold = run_turn(*p, tokens_of(40, 6), 4);
        const uint64_t all_stages = (uint64_t(1) << n_stages) - 1;
        EXPECT_EQ(cold.stats.kv_recorded_pages, static_cast<uint64_t>(2 * n_stages)) << n_stages << " stages";
        EXPECT_EQ(cold.stats.kv_record_stage_mask, all_stages) << n_stages << " stages";
        EXPECT_EQ(cold.stats.kv_lookup_hits, 0u);
        wait_for_records(*p);
        const auto warm = run_turn(*p, tokens_of(40, 6), 4);
        EXPECT_EQ(warm.tokens, cold.tokens);
        EXPECT_EQ(warm.stats.kv_lookup_hits, static_cast<uint64_t>(n_stages)) << n_stages << " stages";
        EXPECT_EQ(warm.stats.kv_hit_stage_mask, all_stages);
    }
}

TEST(cache_isolation, ClientKeysNeverShareEntries) {
    auto file = model("llama", "Q8_0");
    cache_run_options on;
    on.n_stages = 2;
    auto p = cached_chain(file, on);
    ASSERT_NE(p, nullptr);
    const auto prompt = tokens_of(40, 3);
    auto run_keyed = [&](const std::string & key) {
        generation_request req;
        req.prompt = prompt;
        req.max_tokens = 4;
        req.sampling.temperature = 0;
        req.cache_key = key;
        auto r = run_generation(*p, 0, req);
        EXPECT_TRUE(r.is_ok());
        return r.is_ok() ? r->cached_tokens : -1;
    };
    EXPECT_EQ(run_keyed("tenant-a"), 0);
    EXPECT_EQ(run_keyed("tenant-a"), 39);
    EXPECT_EQ(run_keyed("tenant-b"), 0) << "another tenant's prefix was served";
    EXPECT_EQ(run_keyed(""), 0);
}

}  // namespace
}  // namespace skippy::testing
