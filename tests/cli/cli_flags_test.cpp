// The run-time flags as the CLI parses them (src/cli/common.cpp), down to the chain
// they configure: here --kv-cache-demote, whose effect needs a record the exact-state
// tier missed, which only a held record worker makes certain.
#include "../model/model_fixture.h"
#include "../cache/worker_gate.h"
#include "../transport/cache_fixture.h"
#include "cli/common.h"

#include <algorithm>
#include <future>

namespace skippy::testing {
namespace {

struct parsed_flags {
    skippy::cli::runtime_flags         runtime;
    transport::chain_options   chain;
};

// Parses `args` as the flags of a stage-running command.
std::unique_ptr<parsed_flags> parse(std::vector<std::string> args) {
    auto out = std::make_unique<parsed_flags>();
    CLI::App app{"test"};
    skippy::cli::add_runtime_flags(&app, out->runtime, 1);
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
    auto chain = skippy::cli::to_chain_options(out->runtime);
    EXPECT_TRUE(chain.is_ok()) << chain.error().to_string();
    if (!chain.is_ok()) return nullptr;
    out->chain = *chain;
    return out;
}

TEST(cli_flags, KvCacheDemoteMapsOntoTheStageCacheConfig) {
    EXPECT_TRUE(parse({})->chain.cache.config.demote_on_evict) << "on by default";
    EXPECT_TRUE(parse({"--kv-cache-demote", "on"})->chain.cache.config.demote_on_evict);
    EXPECT_FALSE(parse({"--kv-cache-demote", "off"})->chain.cache.config.demote_on_evict);
    CLI::App app{"test"};
    skippy::cli::runtime_flags f;
    skippy::cli::add_runtime_flags(&app, f, 1);
    EXPECT_THROW(app.parse(std::vector<std::string>{"no", "--kv-cache-demote"}), CLI::ValidationError);
}

// A resident entry whose exact-state records were superseded (the worker held busy in
// a's record while b's and then c's records were submitted, with room for one waiting
// record) is evicted: with
// demotion on it is exported and a later request restores it from the exact tier; with
// demotion off it is gone and the request computes everything. The entry is b plus the
// answer's computed tokens (the record at Stop), so the later request is the next turn
// of that conversation: b, the answer, more.
TEST(cli_flags, KvCacheDemoteOffKeepsEvictedEntriesOutOfTheExactTier) {
    synthetic_model_options mo;
    mo.n_embd = 128; mo.n_layer = 2; mo.n_head = 4; mo.n_head_kv = 2; mo.n_ff = 256; mo.n_vocab = 300; mo.type = "Q8_0";
    auto file = synthetic_model(mo);
    ASSERT_NE(file, nullptr);
    const auto a = tokens_of(70, 1), b = tokens_of(70, 2), c3 = tokens_of(70, 3);
    std::vector<token_id> want, want_next;
    for (const char * demote : {"on", "off"}) {
        auto flags = parse({"--kv-cache-demote", demote, "--ctx-size", "128", "-t", "1"});
        ASSERT_NE(flags, nullptr);
        auto sink = std::make_shared<memory_sink>();
        flags->chain.cache.sink = sink;
        // One waiting record at most, so that a newer record drops (supersedes) it.
        flags->chain.cache.config.max_pending_records = 1;
        auto made = skippy::cli::make_pipeline(file, skippy::cli::chain_choice{}, flags->runtime, flags->chain);
        ASSERT_TRUE(made.is_ok()) << made.error().to_string();
        transport::chain_pipeline & p = **made;
        cache::stage_cache * c = stage_cache_of(p, 0);
        ASSERT_NE(c, nullptr);

        // Hold the worker in a's record, so that b's exact records are superseded by c's.
        cache::testing::worker_gate gate(*c);
        run_turn(p, a, 2);
        gate.wait_until_held();
        const auto cold_b = run_turn(p, b, 4);
        (void)run_turn(p, c3, 4);
        gate.open();
        c->wait_for_records();
        c->set_record_hook_for_testing(nullptr);
        // Five records came while the worker was held (a's at Stop, b's and c's after the
        // prompt and at Stop): each but the last replaced the waiting one, merged when it
        // extends it (the same conversation), else superseded. b's were superseded by
        // c's (other tokens), which ran. (Whether a lane's record at Stop comes before the
        // next request's is the chain's timing, so only the sum is fixed.)
        EXPECT_EQ(c->stats().n_records_superseded + c->stats().n_records_merged, 4) << demote;
        EXPECT_GE(c->stats().n_records_superseded, 1) << demote;
        forget_resident(*c);  // evicts a, b (with their answers) and c: demoted only with demotion on

        const std::vector<token_id> next = concat(concat(b, cold_b.tokens), tokens_of(5, 3));
        const auto again = run_turn(p, next, 4);
        if (want.empty()) want = cold_b.tokens;
        if (want_next.empty()) want_next = again.tokens;
        EXPECT_EQ(cold_b.tokens, want) << "demotion changes no output";
        EXPECT_EQ(again.tokens, want_next) << "demotion changes no output";
        if (std::string(demote) == "on") {
            // b with its answer at least (a's and c's entries may be demoted too, when the
            // pool evicts them during the turns): its records were all superseded, so only
            // a demotion can have put it into the exact tier, where `again` finds it.
            EXPECT_GE(c->stats().n_demotions, 1);
            EXPECT_EQ(again.cached, static_cast<int64_t>(b.size() + cold_b.tokens.size()) - 1)
                << "restored from the exact-state tier: b and the answer but its last token";
            EXPECT_GT(sink->count("skippy.kv.tier", "exact_state"), 0);
        } else {
            EXPECT_EQ(c->stats().n_demotions, 0);
            EXPECT_EQ(again.cached, 0) << "nothing left to restore b from";
            EXPECT_EQ(sink->count("skippy.kv.tier", "exact_state"), 0);
        }
    }
}

}  // namespace
}  // namespace skippy::testing
