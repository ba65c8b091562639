// Helpers for prefix-cache tests over real chains: scenarios of prompts run with the
// cache off and on, decision events captured in memory.
#pragma once

#include "chain_fixture.h"
#include "telemetry/telemetry.h"

#include <atomic>
#include <functional>
#include <mutex>

namespace skippy::testing {

// Keeps every event (thread-safe). A hook, if set, sees each event after it is kept,
// on the emitting stage's thread: a stage's own thread, where a test may touch that
// stage's cache between two of its steps.
class memory_sink final : public telemetry::event_sink_i {
public:
    using hook_fn = std::function<void(const telemetry::event &)>;

    void emit(const telemetry::event & e) override {
        hook_fn hook;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            events_.push_back(e);
            hook = hook_;
        }
        if (hook) hook(e);
    }
    void set_hook(hook_fn hook) {
        std::lock_guard<std::mutex> lock(mutex_);
        hook_ = std::move(hook);
    }
    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        events_.clear();
    }
    std::vector<telemetry::event> events() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return events_;
    }
    // Events whose attribute `key` equals `value`.
    int count(const std::string & key, const std::string & value) const {
        int n = 0;
        for (const auto & e : events()) {
            if (text_attr(e, key) == value) ++n;
        }
        return n;
    }
    // Lookup or record events of one stage with this skippy.kv.decision.
    int count_decision(int32_t stage, const std::string & decision) const {
        int n = 0;
        for (const auto & e : events()) {
            if (e.stage == stage && text_attr(e, "skippy.kv.decision") == decision) ++n;
        }
        return n;
    }
    // Lookup events of one stage whose decision starts with `prefix`.
    int count_decisions_starting(int32_t stage, const std::string & prefix) const {
        int n = 0;
        for (const auto & e : events()) {
            if (e.stage == stage && text_attr(e, "skippy.kv.decision").rfind(prefix, 0) == 0) ++n;
        }
        return n;
    }
    // Restores (not probes) that put tokens into a session from `tier`.
    int count_restores_from(const std::string & tier) const {
        int n = 0;
        for (const auto & e : events()) {
            if (e.name != cache::lookup_event_name) continue;
            if (text_attr(e, "skippy.kv.decision").rfind("probe_", 0) == 0) continue;
            if (text_attr(e, "skippy.kv.tier") == tier && int_attr(e, "skippy.kv.restored_tokens") > 0) ++n;
        }
        return n;
    }
    // The integer attribute `key` of the first event of `stage` with this decision; -1
    // when there is none.
    int64_t first_int(int32_t stage, const std::string & decision, const std::string & key) const {
        for (const auto & e : events()) {
            if (e.stage == stage && text_attr(e, "skippy.kv.decision") == decision) return int_attr(e, key);
        }
        return -1;
    }

    static std::string text_attr(const telemetry::event & e, const std::string & key) {
        for (const auto & [k, v] : e.attrs) {
            if (k == key && std::holds_alternative<std::string>(v)) return std::get<std::string>(v);
        }
        return {};
    }
    static int64_t int_attr(const telemetry::event & e, const std::string & key) {
        for (const auto & [k, v] : e.attrs) {
            if (k == key && std::holds_alternative<int64_t>(v)) return std::get<int64_t>(v);
        }
        return -1;
    }

private:
    mutable std::mutex            mutex_;
    std::vector<telemetry::event> events_;
    hook_fn                       hook_;
};

struct cache_run_options {
    int32_t  n_stages = 1;
    bool     cache_on = true;
    int64_t  min_tokens = 8;
    int64_t  max_entries = 64;
    int64_t  exact_max_bytes = 64ll << 20;
    int64_t  resident_tokens = -1;
    int32_t  ctx = 512;
    int32_t  threads = 1;
    int32_t  lanes = 1;
    int64_t  checkpoint_tokens = 64;  // stages with recurrent layers: snapshot spacing
    std::vector<layer_range> layers;  // the stages' layer ranges; empty: n_stages even ones
    std::shared_ptr<memory_sink> sink;
};

inline std::unique_ptr<transport::chain_pipeline> cached_chain(std::shared_ptr<const gguf::file> file, const cache_run_options & o) {
    stage_options so;
    so.n_threads = o.threads;
    so.ctx_size = o.ctx;
    so.n_lanes = o.lanes;
    transport::chain_options co;
    co.cache.config.mode = o.cache_on ? cache::cache_mode::lookup_record : cache::cache_mode::off;
    co.cache.config.min_tokens = o.min_tokens;
    co.cache.config.max_entries = o.max_entries;
    co.cache.config.exact_max_bytes = o.exact_max_bytes;
    co.cache.resident_tokens = o.resident_tokens;
    co.cache.config.checkpoint_tokens = o.checkpoint_tokens;
    co.cache.sink = o.sink;
    auto p = o.layers.empty() ? transport::make_embedded_chain(std::move(file), o.n_stages, so, co)
                              : transport::make_embedded_chain(std::move(file), o.layers, so, co);
    EXPECT_TRUE(p.is_ok()) << p.error().to_string();
    return p.is_ok() ? std::move(p).value() : nullptr;
}

struct turn_result {
    std::vector<token_id> tokens;
    int64_t               cached = 0;
    protocol::stats_block stats;
};

inline turn_result run_turn(transport::chain_pipeline & p, const std::vector<token_id> & prompt, int32_t n, int32_t chunk = 16) {
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = n;
    req.prefill_chunk_tokens = chunk;
    req.sampling.temperature = 0;
    auto res = run_generation(p, 0, req);
    EXPECT_TRUE(res.is_ok()) << res.error().to_string();
    turn_result out;
    if (!res.is_ok()) return out;
    out.tokens = res->tokens;
    out.cached = res->cached_tokens;
    out.stats = p.last_stats(0);
    return out;
}

// Waits for every stage's asynchronous exact-state records.
inline void wait_for_records(transport::chain_pipeline & p) {
    if (p.cache_host() && p.cache_host()->cache()) p.cache_host()->cache()->wait_for_records();
    for (const auto & s : p.servers()) {
        if (s->cache_host() && s->cache_host()->cache()) s->cache_host()->cache()->wait_for_records();
    }
}

// The cache of stage `index` of an in-process chain (stage 0 is the pipeline's own).
inline cache::stage_cache * stage_cache_of(transport::chain_pipeline & p, int32_t index) {
    transport::stage_cache_host * host = index == 0 ? p.cache_host() : p.servers()[static_cast<size_t>(index - 1)]->cache_host();
    return host ? host->cache() : nullptr;
}

// Drops every resident entry of one stage, as if evicted since it was recorded: asking
// for more blocks than any pool has evicts every unreferenced one (demoting it into the
// exact-state tier when that has no entry for its path yet). Call it on the thread
// driving the stage's lane `session`: for stage 0 the test's own thread, for a server
// one of its events (see forget_at_event).
inline void forget_resident(cache::stage_cache & c, int32_t session = 0) {
    (void)c.make_room_for_write(session, 0, int64_t{1} << 30);
    ASSERT_EQ(c.stats().index.n_entries[static_cast<size_t>(cache::entry_kind::resident)], 0) << "a resident entry survived";
}

// Drops every resident and exact-state entry of one stage (activation frames stay: a
// frame alone never skips compute). Same thread rule as forget_resident; the stage's
// record worker must be idle (wait_for_records).
inline void forget_entries(cache::stage_cache & c, int32_t session = 0) {
    forget_resident(c, session);
    auto & store = c.exact_store_for_testing();
    for (auto id : store.entries_for_testing()) ASSERT_TRUE(store.evict(id).is_ok());
    ASSERT_EQ(c.stats().index.n_entries[static_cast<size_t>(cache::entry_kind::exact_state)], 0) << "an entry survived";
}

enum class forget_what : uint8_t { everything, resident };

// Once per stage in `stages`, when that stage emits its first lookup decision starting
// with `prefix` (e.g. "probe_": after it answered a probe, before the restore that
// follows), drops its entries on its own thread: the chain saw them at probe time and
// misses them at restore.
inline void forget_at_event(memory_sink & sink, transport::chain_pipeline & p, std::vector<int32_t> stages, const std::string & prefix,
                            forget_what what = forget_what::everything) {
    std::vector<cache::stage_cache *> caches;
    for (int32_t s : stages) {
        caches.push_back(stage_cache_of(p, s));
        ASSERT_NE(caches.back(), nullptr);
    }
    auto done = std::make_shared<std::vector<std::atomic<bool>>>(stages.size());
    sink.set_hook([caches, stages, prefix, what, done](const telemetry::event & e) {
        for (size_t i = 0; i < stages.size(); ++i) {
            if (e.stage != stages[i] || memory_sink::text_attr(e, "skippy.kv.decision").rfind(prefix, 0) != 0) continue;
            if ((*done)[i].exchange(true)) return;
            if (what == forget_what::resident) {
                forget_resident(*caches[i]);
            } else {
                forget_entries(*caches[i]);
            }
        }
    });
}
inline void forget_at_event(memory_sink & sink, transport::chain_pipeline & p, int32_t index, const std::string & prefix) {
    forget_at_event(sink, p, std::vector<int32_t>{index}, prefix);
}

inline std::vector<token_id> tokens_of(int n, int salt) {
    std::vector<token_id> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(3 + (i * 37 + salt * 101) % 290);
    return p;
}

inline std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id> & b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// A chain under cache pressure: a 128-token context and, with the cache on, one
// resident entry with 32 positions of room, so every new prompt evicts the last one.
inline cache_run_options pressure_options(int32_t n_stages, bool cache_on) {
    cache_run_options o;
    o.n_stages = n_stages;
    o.cache_on = cache_on;
    o.ctx = 128;
    if (cache_on) {
        o.max_entries = 1;
        o.resident_tokens = 32;
        o.sink = std::make_shared<memory_sink>();
    }
    return o;
}

// Four 70-token prompts, twice, through chains made with pressure_options: every output
// equals the cache-off one, and in the second round every prompt restores 69 tokens
// (from whichever tier kept it) on every stage.
inline void expect_pressure_exact(transport::chain_pipeline & cold, transport::chain_pipeline & warm, int32_t n_stages) {
    std::vector<std::vector<token_id>> prompts;
    for (int i = 0; i < 4; ++i) prompts.push_back(tokens_of(70, 10 + i));
    for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto want = run_turn(cold, prompts[i], 6);
            const auto got = run_turn(warm, prompts[i], 6);
            EXPECT_EQ(got.tokens, want.tokens) << "round " << round << " prompt " << i;
            if (round == 1) {
                EXPECT_EQ(got.cached, 69) << "round 1 prompt " << i << " restores from some tier";
                EXPECT_EQ(got.stats.kv_hit_stage_mask, (uint64_t(1) << n_stages) - 1) << "round 1 prompt " << i;
            }
            wait_for_records(warm);
        }
    }
}

// Runs the scenario on one pipeline. Prompts that depend on earlier outputs
// (multi-turn growth) are built from this run's outputs, which the exactness check
// requires to equal the reference anyway.
inline std::vector<turn_result> run_scenario(transport::chain_pipeline & p) {
    std::vector<turn_result> out;
    const auto base = tokens_of(60, 1);
    out.push_back(run_turn(p, base, 8));                                   // 0: cold
    out.push_back(run_turn(p, base, 8));                                   // 1: repeat
    out.push_back(run_turn(p, concat(std::vector<token_id>(base.begin(), base.begin() + 45), tokens_of(12, 7)), 8));  // 2: shared prefix, new suffix
    auto turn2 = concat(concat(base, out[1].tokens), tokens_of(9, 3));
    out.push_back(run_turn(p, turn2, 8));                                  // 3: multi-turn growth
    out.push_back(run_turn(p, std::vector<token_id>(base.begin(), base.begin() + 30), 8));  // 4: shorter than cached
    out.push_back(run_turn(p, concat(turn2, tokens_of(20, 9)), 8));        // 5: longer than cached
    out.push_back(run_turn(p, tokens_of(50, 42), 8));                      // 6: unrelated
    out.push_back(run_turn(p, base, 8));                                   // 7: the first prompt again
    return out;
}

// Runs the scenario on a cache-off and a cache-on pipeline: the tokens must be equal
// turn by turn, and the cache-on run must restore what each turn can reuse.
inline void expect_scenario_exact(transport::chain_pipeline & cold, transport::chain_pipeline & warm, int32_t n_stages) {
    const auto want = run_scenario(cold);
    const auto got = run_scenario(warm);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "turn " << i;
        EXPECT_EQ(want[i].cached, 0) << "turn " << i << ": the cache-off run restored something";
    }
    const uint64_t all_stages = (uint64_t(1) << n_stages) - 1;
    EXPECT_EQ(got[0].cached, 0);
    EXPECT_EQ(got[1].cached, 59) << "a repeat restores all but the last prompt token";
    EXPECT_EQ(got[1].stats.kv_hit_stage_mask, all_stages);
    EXPECT_EQ(got[2].cached, 45) << "the shared part of a diverging prompt";
    EXPECT_EQ(got[2].stats.kv_hit_stage_mask, all_stages);
    // The record at Stop holds the answer too, but its last token (sampled, never fed).
    EXPECT_EQ(got[3].cached, static_cast<int64_t>(60 + got[1].tokens.size()) - 1)
        << "multi-turn growth restores the previous prompt and answer";
    EXPECT_EQ(got[4].cached, 29) << "a shorter query is served by a longer entry";
    EXPECT_GE(got[5].cached, got[3].cached) << "a longer query restores the longest recorded prefix";
    EXPECT_EQ(got[6].cached, 0);
    EXPECT_EQ(got[6].stats.kv_hit_stage_mask, 0u);
    EXPECT_EQ(got[7].cached, 59);
    EXPECT_GT(got[0].stats.kv_record_stage_mask, 0u) << "the cold run recorded";
}

}  // namespace skippy::testing
