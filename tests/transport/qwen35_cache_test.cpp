// qwen35 and the prefix cache (docs/kv-cache.md §4, §6, §10): a stage with recurrent
// layers restores a prefix with the snapshot of its state taken at that length — at a
// multiple of the checkpoint spacing, the prompt's end or the answer's — through the
// exact-state tier; its resident tier says why it serves nothing; a stage holding only
// attention layers keeps using KV as any other. With the cache on, a run of prompts
// sharing prefixes gives exactly the tokens of the cache off, on 1 to 4 stages, split
// evenly and at the borders of recurrent and attention layers, with prefill chunks that
// cross the checkpoints. Then the shared synth-qwen35 model on a 2-stage chain: two
// prompts sharing about 180 tokens, the second restoring at least 128.
#include "cache_fixture.h"
#include "common/test_data.h"

#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace skippy::testing {
namespace {

// 8 layers; 3 and 7 attend, the others are gated delta-net.
std::shared_ptr<const gguf::file> q35_chain_model() {
    synthetic_model_options o;
    o.arch = "qwen35";
    o.n_embd = 64; o.n_layer = 8; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok()) << w.error().to_string();
    if (!w.is_ok()) return nullptr;
    auto f = gguf::file::from_bytes(w->to_bytes());
    EXPECT_TRUE(f.is_ok());
    return f.is_ok() ? std::shared_ptr<const gguf::file>(std::move(f).value()) : nullptr;
}

struct q35_split {
    std::string              name;
    std::vector<layer_range> layers;
    int32_t                  chunk = 7;  // prefill chunk: crosses the checkpoints (every 16)
};

void PrintTo(const q35_split & s, std::ostream * os) { *os << s.name; }

bool attention_only(const layer_range & r) {
    for (int32_t il = r.start; il < r.end; ++il) {
        if (il % 4 != 3) return false;
    }
    return true;
}

class qwen35_cache : public ::testing::TestWithParam<q35_split> {};

TEST_P(qwen35_cache, CacheOnGivesTheTokensOfCacheOffAndRestoresAtCheckpoints) {
    const q35_split & split = GetParam();
    const int32_t n_stages = static_cast<int32_t>(split.layers.size());
    auto file = q35_chain_model();
    ASSERT_NE(file, nullptr);

    cache_run_options off;
    off.n_stages = n_stages;
    off.layers = split.layers;
    off.cache_on = false;
    off.checkpoint_tokens = 16;
    auto cold = cached_chain(file, off);
    ASSERT_NE(cold, nullptr);
    cache_run_options on = off;
    on.cache_on = true;
    on.sink = std::make_shared<memory_sink>();
    auto warm = cached_chain(file, on);
    ASSERT_NE(warm, nullptr);

    const auto a = tokens_of(100, 1);
    std::vector<turn_result> want, got;
    auto turn = [&](const std::vector<token_id> & prompt) {
        want.push_back(run_turn(*cold, prompt, 8, split.chunk));
        got.push_back(run_turn(*warm, prompt, 8, split.chunk));
        ASSERT_EQ(want.back().tokens.size(), 8u);
        EXPECT_EQ(got.back().tokens, want.back().tokens) << "turn " << got.size() - 1 << ", " << split.name;
        EXPECT_EQ(want.back().cached, 0);
        wait_for_records(*warm);
    };
    turn(a);                                                                              // 0: cold
    turn(concat(std::vector<token_id>(a.begin(), a.begin() + 70), tokens_of(30, 2)));     // 1: shares 70
    turn(a);                                                                              // 2: repeat
    turn(concat(concat(a, got[2].tokens), tokens_of(10, 3)));                             // 3: the next turn
    turn(tokens_of(60, 4));                                                               // 4: unrelated
    turn(concat(std::vector<token_id>(a.begin(), a.begin() + 70), tokens_of(30, 5)));     // 5: shares 70 again
    ASSERT_EQ(got.size(), 6u);

    const uint64_t all_stages = (uint64_t(1) << n_stages) - 1;
    EXPECT_EQ(got[0].cached, 0);
    EXPECT_EQ(got[0].stats.kv_record_stage_mask, all_stages) << "every stage recorded";
    EXPECT_EQ(got[1].cached, 64) << "the last checkpoint (every 16) inside the 70 shared tokens";
    EXPECT_EQ(got[1].stats.kv_hit_stage_mask, all_stages);
    EXPECT_EQ(got[2].cached, 99) << "the prompt's end";
    EXPECT_EQ(got[2].stats.kv_hit_stage_mask, all_stages);
    EXPECT_EQ(got[3].cached, 107) << "the answer's end: the prompt and all but the last generated token";
    EXPECT_EQ(got[4].cached, 0);
    EXPECT_EQ(got[4].stats.kv_hit_stage_mask, 0u);
    EXPECT_EQ(got[5].cached, 70) << "turn 1 snapshotted where it left a's path (its branch point)";
    EXPECT_EQ(got[5].stats.kv_hit_stage_mask, all_stages);

    // Each stage restored from the tier its layers allow: exact state with its snapshot
    // where they recur, KV in the resident tier where they only attend.
    for (int32_t s = 0; s < n_stages; ++s) {
        cache::stage_cache * c = stage_cache_of(*warm, s);
        ASSERT_NE(c, nullptr);
        const auto st = c->stats();
        if (attention_only(split.layers[static_cast<size_t>(s)])) {
            EXPECT_GT(st.n_resident_restores, 0) << "stage " << s;
            EXPECT_EQ(st.n_state_records, 0) << "stage " << s;
            EXPECT_EQ(st.exact.n_state_pages, 0) << "stage " << s;
        } else {
            EXPECT_EQ(st.n_resident_restores, 0) << "stage " << s;
            EXPECT_EQ(st.index.n_entries[static_cast<size_t>(cache::entry_kind::resident)], 0) << "stage " << s;
            EXPECT_EQ(st.n_exact_restores, 4) << "stage " << s;
            EXPECT_EQ(st.n_state_restores, 4) << "stage " << s;
            EXPECT_GT(st.n_state_records, 0) << "stage " << s;
            EXPECT_EQ(st.n_quarantines, 0) << "stage " << s;
        }
        EXPECT_TRUE(c->check_invariants().is_ok()) << "stage " << s;
    }
    // The decisions say why the resident tier of a recurrent stage serves nothing.
    const std::string reason(cache::recurrent_layers_reason);
    int recurrent_lookups = 0;
    for (const auto & e : on.sink->events()) {
        if (e.name != cache::lookup_event_name && e.name != cache::record_event_name) continue;
        const bool recurrent = !attention_only(split.layers[static_cast<size_t>(e.stage)]);
        EXPECT_EQ(memory_sink::text_attr(e, "skippy.kv.resident_reason"), recurrent ? reason : "")
            << "stage " << e.stage << " " << memory_sink::text_attr(e, "skippy.kv.decision");
        if (recurrent && e.name == cache::lookup_event_name) ++recurrent_lookups;
        EXPECT_EQ(memory_sink::text_attr(e, "skippy.kv.decision").find("error"), std::string::npos)
            << "stage " << e.stage << " " << memory_sink::text_attr(e, "skippy.kv.decision") << " "
            << memory_sink::text_attr(e, "skippy.kv.error_class");
    }
    EXPECT_GT(recurrent_lookups, 0);
}

INSTANTIATE_TEST_SUITE_P(
    splits, qwen35_cache,
    ::testing::Values(q35_split{"one_stage", {{0, 8}}}, q35_split{"two_even", {{0, 4}, {4, 8}}},
                      q35_split{"two_even_chunk_40", {{0, 4}, {4, 8}}, 40},
                      q35_split{"two_at_border", {{0, 3}, {3, 8}}},
                      q35_split{"three_attention_only_middle", {{0, 3}, {3, 4}, {4, 8}}},
                      q35_split{"four_even", {{0, 2}, {2, 4}, {4, 6}, {6, 8}}},
                      q35_split{"four_at_borders", {{0, 3}, {3, 4}, {4, 7}, {7, 8}}}),
    [](const auto & param_info) { return param_info.param.name; });

// The shared hybrid model on a 2-stage chain, as `skippy generate --stages 2
// --prompts-file F -n 16 --greedy` runs it (records stored between prompts): the
// second of two prompts sharing about 180 tokens restores at least 128 of them and
// gives exactly the tokens of a run with the cache off.
TEST(qwen35_shared_model, ASecondPromptSharingItsFirst180TokensRestoresAtLeast128) {
    SKIPPY_REQUIRE_TEST_FILE(path, "models/synth-qwen35-f32.gguf");
    auto f = gguf::file::open(path);
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    std::shared_ptr<const gguf::file> file(std::move(f).value());
    auto vocab = tokenizer::from_gguf(*file);
    ASSERT_TRUE(vocab.is_ok()) << vocab.error().to_string();
    std::string shared;
    for (int i = 0; shared.empty() || (*vocab)->tokenize(shared, true, false).size() < 180; ++i) {
        shared += "Once upon a time there was a little girl named Lily who loved to play in the park with her dog. ";
    }
    const std::vector<std::string> texts = {shared + "One day she found a red ball under a big tree.",
                                            shared + "Then the sun went down and everyone went home to sleep."};
    std::vector<std::vector<token_id>> prompts;
    for (const auto & t : texts) prompts.push_back((*vocab)->tokenize(t, true, false));
    size_t common = 0;
    while (common < prompts[0].size() && common < prompts[1].size() && prompts[0][common] == prompts[1][common]) ++common;
    ASSERT_GE(common, 180u);
    ASSERT_LT(common, 200u);

    auto run = [&](bool cache_on) {
        stage_options so;
        so.n_threads = 2;
        so.ctx_size = 512;
        transport::chain_options co;
        co.cache.config.mode = cache_on ? cache::cache_mode::lookup_record : cache::cache_mode::off;
        auto p = transport::make_embedded_chain(file, 2, so, co);
        EXPECT_TRUE(p.is_ok()) << p.error().to_string();
        std::vector<generation_result> out;
        if (!p.is_ok()) return out;
        for (const auto & prompt : prompts) {
            generation_request req;
            req.prompt = prompt;
            req.max_tokens = 16;
            req.sampling.temperature = 0;
            req.is_end_of_generation = [&](token_id id) { return (*vocab)->is_end_of_generation(id); };
            auto res = run_generation(**p, 0, req);
            EXPECT_TRUE(res.is_ok()) << res.error().to_string();
            if (!res.is_ok()) return out;
            out.push_back(*res);
            (*p)->wait_for_records();
        }
        return out;
    };
    const auto cold = run(false);
    const auto warm = run(true);
    ASSERT_EQ(cold.size(), 2u);
    ASSERT_EQ(warm.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(warm[i].tokens, cold[i].tokens) << "prompt " << i;
        EXPECT_FALSE(warm[i].tokens.empty());
    }
    EXPECT_EQ(warm[0].cached_tokens, 0);
    EXPECT_GE(warm[1].cached_tokens, 128);
    EXPECT_LE(warm[1].cached_tokens, static_cast<int64_t>(common));
    EXPECT_EQ(warm[1].cache_hit_stage_mask, 3u) << "both stages restored";
}

}  // namespace
}  // namespace skippy::testing
