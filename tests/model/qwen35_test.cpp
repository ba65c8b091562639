// qwen35 (gated delta-net + gated attention): the metadata it reads, the shapes it
// refuses at load, and the recurrent state: a prompt in one call, in chunks or token by
// token gives the same bits; a sequence's rows do not depend on the others in its
// batch or the thread count; a state that does not sit at the span's position is an
// error, never a silent wrong answer. Synthetic models from make-model's writer; the
// shared golden file checks the arithmetic against llama.cpp (golden_test.cpp).
#include "model_fixture.h"

#include "kv/kv_page.h"
#include "model/recurrent_snapshot.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

namespace skippy::testing {
namespace {

synthetic_model_options q35_options() {
    synthetic_model_options o;
    o.arch = "qwen35";
    o.n_embd = 64; o.n_layer = 8; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    return o;
}

gguf::writer q35_writer(const synthetic_model_options & o) {
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok()) << w.error().to_string();
    return std::move(w).value();
}

// The status of binding every layer of the file w writes.
status q35_bind(const gguf::writer & w) {
    auto file = parse(w);
    if (!file) return make_error(error_code::internal, "unparsable");
    auto hp = model_hparams::from_gguf(*file);
    if (!hp.is_ok()) return hp.error();
    auto s = model_slice::bind(file, {0, hp->n_layer});
    return s.is_ok() ? status::ok() : s.error();
}

// A copy of the synthetic model with metadata keys (under "qwen35.") set to values;
// a key without a value is left out.
gguf::writer q35_with(const std::vector<std::pair<std::string, std::optional<gguf::value>>> & changes) {
    auto file = parse(q35_writer(q35_options()));
    gguf::writer w;
    for (const auto & entry : file->metadata()) {
        // (A named reference, not a structured binding: clang 14 cannot capture those.)
        const std::string & key = entry.first;
        const auto change = std::find_if(changes.begin(), changes.end(), [&](const auto & c) { return "qwen35." + c.first == key; });
        if (change == changes.end()) w.set(key, entry.second);
    }
    for (const auto & [key, v] : changes) {
        if (v) w.set("qwen35." + key, *v);
    }
    for (const auto & t : file->tensors()) w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    return w;
}

// The synthetic model bound whole.
struct q35_bound {
    std::shared_ptr<const gguf::file> file;
    std::unique_ptr<model_slice>      slice;
};
q35_bound q35_bind_whole() {
    q35_bound m;
    m.file = synthetic_model(q35_options());
    if (!m.file) return m;
    auto s = model_slice::bind(m.file, {0, 8});
    EXPECT_TRUE(s.is_ok()) << s.error().to_string();
    if (s.is_ok()) m.slice = std::move(s).value();
    return m;
}

TEST(qwen35, ReadsTheHybridLayoutAndDeltaNetSizes) {
    auto file = parse(q35_writer(q35_options()));
    ASSERT_NE(file, nullptr);
    auto hp = model_hparams::from_gguf(*file);
    ASSERT_TRUE(hp.is_ok()) << hp.error().to_string();
    EXPECT_EQ(hp->arch, model_arch::qwen35);
    for (int32_t il = 0; il < 8; ++il) {
        EXPECT_EQ(hp->is_recurrent(il), il % 4 != 3) << il;
    }
    EXPECT_EQ(hp->ssm.d_conv, 4);
    EXPECT_EQ(hp->ssm.d_state, 16);
    EXPECT_EQ(hp->ssm.n_group, 2);
    EXPECT_EQ(hp->ssm.n_v_head, 4);
    EXPECT_EQ(hp->ssm.d_inner, 64);
    EXPECT_EQ(hp->ssm.conv_channels(), 128);
    EXPECT_EQ(hp->rope.mode, rope_mode::neox);
    EXPECT_EQ(hp->rope.n_rot, 4);
    auto slice = model_slice::bind(file, {0, 8});
    ASSERT_TRUE(slice.is_ok()) << slice.error().to_string();
    EXPECT_EQ((*slice)->n_recurrent_layers(), 6);
    auto upper = model_slice::bind(file, {3, 5});
    ASSERT_TRUE(upper.is_ok());
    EXPECT_EQ((*upper)->n_recurrent_layers(), 1);  // layer 3 attends, layer 4 is recurrent
    auto attention_only = model_slice::bind(file, {3, 4});
    ASSERT_TRUE(attention_only.is_ok());
    EXPECT_FALSE((*attention_only)->has_recurrent_layers());
    EXPECT_TRUE((*attention_only)->make_recurrent_state().empty());
}

TEST(qwen35, MissingDeltaNetTensorsAreRefusedByName) {
    auto file = parse(q35_writer(q35_options()));
    ASSERT_NE(file, nullptr);
    for (const char * name : {"blk.0.ssm_a", "blk.1.ssm_conv1d.weight", "blk.2.ssm_dt.bias", "blk.0.attn_gate.weight",
                              "blk.5.ssm_out.weight", "blk.3.attn_q_norm.weight", "blk.3.post_attention_norm.weight"}) {
        const status st = q35_bind(copy_without(*file, name));
        ASSERT_FALSE(st.is_ok()) << name;
        EXPECT_NE(st.to_string().find(name), std::string::npos) << st.to_string();
    }
}

TEST(qwen35, DeltaNetMetadataDisagreeingWithTheTensorsIsRefused) {
    // A conv kernel the ssm_conv1d tensor does not have: refused at the tensor.
    status st = q35_bind(q35_with({{"ssm.conv_kernel", gguf::value::make_u32(3)}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("ssm_conv1d"), std::string::npos) << st.to_string();
    // Inner size not time_step_rank x state_size.
    st = q35_bind(q35_with({{"ssm.inner_size", gguf::value::make_u32(60)}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("ssm.inner_size"), std::string::npos) << st.to_string();
    // A state size consistent with a changed inner size, but not with the tensors.
    st = q35_bind(q35_with({{"ssm.state_size", gguf::value::make_u32(8)}, {"ssm.inner_size", gguf::value::make_u32(32)}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("blk.0.attn_qkv.weight"), std::string::npos) << st.to_string();
    // Groups that do not divide the v heads.
    st = q35_bind(q35_with({{"ssm.group_count", gguf::value::make_u32(3)}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("ssm.group_count"), std::string::npos) << st.to_string();
    // A state too large to allocate per lane, whatever the tensors.
    st = q35_bind(q35_with({{"ssm.state_size", gguf::value::make_u32(1024)}, {"ssm.inner_size", gguf::value::make_u32(4 * 1024 * 8)},
                            {"ssm.time_step_rank", gguf::value::make_u32(32)}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("too large"), std::string::npos) << st.to_string();
    // Missing keys are named.
    st = q35_bind(q35_with({{"ssm.time_step_rank", std::nullopt}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("qwen35.ssm.time_step_rank"), std::string::npos) << st.to_string();
    // An M-RoPE extra section (positions we do not produce) is unsupported.
    st = q35_bind(q35_with({{"rope.dimension_sections", gguf::value::make_i32_array({1, 0, 0, 1})}}));
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), error_code::unsupported) << st.to_string();
}

// Logits of ids evaluated through a stage in chunks (eval_logits), for several chunk
// sizes and thread counts: every one bitwise equal to the one-call prompt.
TEST(qwen35, ChunkedPrefillEqualsTokenByTokenBitwise) {
    auto file = synthetic_model(q35_options());
    ASSERT_NE(file, nullptr);
    const auto ids = sample_ids(70, 300, 7);
    const auto whole = eval_logits(file, ids, {0, 1, kv_dtype::f16});
    ASSERT_FALSE(whole.empty());
    for (const eval_settings e : {eval_settings{1, 1, kv_dtype::f16}, eval_settings{3, 2, kv_dtype::f16},
                                  eval_settings{17, 1, kv_dtype::f16}, eval_settings{0, 2, kv_dtype::f16}}) {
        EXPECT_TRUE(bitwise_equal(eval_logits(file, ids, e), whole)) << "chunk " << e.chunk_tokens << " threads " << e.n_threads;
    }
    // The recurrence is really there: changing token 0 moves the last logits.
    auto other = ids;
    other[0] = (other[0] + 1) % 300;
    const auto moved = eval_logits(file, other, {0, 1, kv_dtype::f16});
    EXPECT_NE(std::memcmp(moved.data() + moved.size() - 300, whole.data() + whole.size() - 300, 300 * sizeof(float)), 0);
}

// Batches mixing sequences at different positions: every row equals its sequence run
// alone, with one thread or two.
TEST(qwen35, EveryRowOfABatchEqualsItsSequenceAlone) {
    const q35_bound m = q35_bind_whole();
    ASSERT_NE(m.slice, nullptr);
    const model_slice & slice = *m.slice;
    const int64_t n_embd = slice.hparams().n_embd;
    std::mt19937 rng(99);
    constexpr int n_seqs = 4;
    constexpr int64_t len = 40;
    std::vector<std::vector<token_id>> seqs(n_seqs);
    for (auto & s : seqs) {
        for (int64_t i = 0; i < len; ++i) s.push_back(static_cast<token_id>(rng() % 300));
    }
    kv_pool pool(slice.kv_geometry_for(kv_dtype::f16), 64);
    forward_workspace ws;
    std::vector<std::vector<float>> want;
    for (const auto & s : seqs) {
        kv_sequence kv(pool);
        recurrent_state rs = slice.make_recurrent_state();
        std::vector<float> x(s.size() * static_cast<size_t>(n_embd));
        ASSERT_TRUE(slice.embed(s, x.data()).is_ok());
        ASSERT_TRUE(slice.forward_layers(x.data(), len, 0, kv, nullptr, ws, &rs).is_ok());
        EXPECT_EQ(rs.n_tokens(), len);
        want.push_back(std::move(x));
    }
    for (int32_t n_threads : {1, 2}) {
        kernels::thread_pool threads(n_threads);
        std::vector<std::unique_ptr<kv_sequence>> kvs;
        std::vector<recurrent_state> states;
        for (int i = 0; i < n_seqs; ++i) {
            kvs.push_back(std::make_unique<kv_sequence>(pool));
            states.push_back(slice.make_recurrent_state());
        }
        std::vector<std::vector<float>> got(n_seqs, std::vector<float>(static_cast<size_t>(len * n_embd)));
        std::vector<int64_t> done(n_seqs, 0);
        while (std::any_of(done.begin(), done.end(), [](int64_t d) { return d < len; })) {
            std::vector<int> order;
            for (int i = 0; i < n_seqs; ++i) {
                if (done[static_cast<size_t>(i)] < len && rng() % 3 != 0) order.push_back(i);
            }
            if (order.empty()) continue;
            std::shuffle(order.begin(), order.end(), rng);
            std::vector<sequence_span> spans;
            std::vector<float> x;
            for (int i : order) {
                const int64_t start = done[static_cast<size_t>(i)];
                const int64_t n = std::min<int64_t>(len - start, 1 + static_cast<int64_t>(rng() % 9));
                spans.push_back({kvs[static_cast<size_t>(i)].get(), start, n, &states[static_cast<size_t>(i)]});
                std::vector<float> rows(static_cast<size_t>(n * n_embd));
                const auto & s = seqs[static_cast<size_t>(i)];
                ASSERT_TRUE(slice.embed(std::span<const token_id>(s).subspan(static_cast<size_t>(start), static_cast<size_t>(n)), rows.data()).is_ok());
                x.insert(x.end(), rows.begin(), rows.end());
            }
            ASSERT_TRUE(slice.forward_batch(x.data(), spans, &threads, ws).is_ok());
            size_t at = 0;
            for (const sequence_span & sp : spans) {
                const int i = static_cast<int>(std::find_if(kvs.begin(), kvs.end(), [&](const auto & k) { return k.get() == sp.kv; }) - kvs.begin());
                std::memcpy(got[static_cast<size_t>(i)].data() + sp.pos_start * n_embd, x.data() + at, static_cast<size_t>(sp.n_tokens * n_embd) * sizeof(float));
                at += static_cast<size_t>(sp.n_tokens * n_embd);
                done[static_cast<size_t>(i)] += sp.n_tokens;
            }
        }
        for (int i = 0; i < n_seqs; ++i) EXPECT_TRUE(bitwise_equal(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])) << "seq " << i << " threads " << n_threads;
    }
}

TEST(qwen35, AStateThatIsNotAtTheSpansPositionIsAnError) {
    const q35_bound m = q35_bind_whole();
    ASSERT_NE(m.slice, nullptr);
    const model_slice & slice = *m.slice;
    const int64_t n_embd = slice.hparams().n_embd;
    kv_pool pool(slice.kv_geometry_for(kv_dtype::f16), 16);
    forward_workspace ws;
    kv_sequence kv(pool);
    const auto ids = sample_ids(12, 300, 3);
    std::vector<float> x(ids.size() * static_cast<size_t>(n_embd));
    ASSERT_TRUE(slice.embed(ids, x.data()).is_ok());
    // No state at all.
    status st = slice.forward_layers(x.data(), 12, 0, kv, nullptr, ws);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(kv.n_tokens(), 0);
    // A state of another slice's shape.
    auto upper = model_slice::bind(m.file, {3, 5});
    ASSERT_TRUE(upper.is_ok());
    recurrent_state wrong = (*upper)->make_recurrent_state();
    EXPECT_FALSE(slice.forward_layers(x.data(), 12, 0, kv, nullptr, ws, &wrong).is_ok());
    // Run 12, cut the KV back to 8: continuing at 8 needs the state at 8, which it is not.
    recurrent_state rs = slice.make_recurrent_state();
    ASSERT_TRUE(slice.forward_layers(x.data(), 12, 0, kv, nullptr, ws, &rs).is_ok());
    kv.truncate(8);
    std::vector<float> y(4 * static_cast<size_t>(n_embd));
    ASSERT_TRUE(slice.embed(std::span<const token_id>(ids).subspan(8), y.data()).is_ok());
    const std::vector<float> y_before = y;
    st = slice.forward_layers(y.data(), 4, 8, kv, nullptr, ws, &rs);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("recurrent"), std::string::npos) << st.to_string();
    EXPECT_EQ(kv.n_tokens(), 8);
    EXPECT_TRUE(bitwise_equal(y, y_before));
    rs.truncate(8);
    EXPECT_EQ(rs.n_tokens(), -1) << "a state cannot be cut back";
    EXPECT_FALSE(slice.forward_layers(y.data(), 4, 8, kv, nullptr, ws, &rs).is_ok());
    // Position 0 restarts the state: the same bits as a fresh one.
    kv.truncate(0);
    std::vector<float> again(ids.size() * static_cast<size_t>(n_embd)), fresh = again;
    ASSERT_TRUE(slice.embed(ids, again.data()).is_ok());
    fresh = again;
    ASSERT_TRUE(slice.forward_layers(again.data(), 12, 0, kv, nullptr, ws, &rs).is_ok());
    kv_sequence kv2(pool);
    recurrent_state rs2 = slice.make_recurrent_state();
    ASSERT_TRUE(slice.forward_layers(fresh.data(), 12, 0, kv2, nullptr, ws, &rs2).is_ok());
    EXPECT_TRUE(bitwise_equal(again, fresh));
}

// The stage keeps a state per lane: truncating a lane to its length keeps it going, to
// 0 restarts it, anywhere else makes the lane refuse to continue until it restarts.
TEST(qwen35, StageLanesFollowTheirRecurrentState) {
    auto file = synthetic_model(q35_options());
    ASSERT_NE(file, nullptr);
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = 64;
    auto loaded = stage::load(file, so);
    ASSERT_TRUE(loaded.is_ok());
    stage & s = **loaded;
    EXPECT_TRUE(s.has_recurrent_layers());
    const int64_t n_embd = s.hparams().n_embd;
    const auto ids = sample_ids(10, 300, 5);
    std::vector<float> out(10 * static_cast<size_t>(n_embd));
    ASSERT_TRUE(s.forward(0, 0, ids, {}, 10, out).is_ok());
    EXPECT_EQ(s.lane_recurrent_tokens(0), 10);
    s.truncate_lane(0, 10);
    EXPECT_EQ(s.lane_recurrent_tokens(0), 10);
    s.truncate_lane(0, 6);
    EXPECT_EQ(s.lane_recurrent_tokens(0), -1);
    const status st = s.forward(0, 6, std::span<const token_id>(ids).subspan(6), {}, 4, out);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("recurrent layers cannot be restored from KV"), std::string::npos) << st.to_string();
    EXPECT_EQ(s.lane_tokens(0), 6);
    ASSERT_TRUE(s.forward(0, 0, ids, {}, 10, out).is_ok());
    EXPECT_EQ(s.lane_recurrent_tokens(0), 10);
}

// The synthetic model as one stage with these threads, context and lanes.
std::unique_ptr<stage> q35_stage(int32_t n_threads, int32_t ctx, int32_t n_lanes) {
    auto file = synthetic_model(q35_options());
    if (!file) return nullptr;
    stage_options so;
    so.n_threads = n_threads;
    so.ctx_size = ctx;
    so.n_lanes = n_lanes;
    auto loaded = stage::load(file, so);
    EXPECT_TRUE(loaded.is_ok()) << loaded.error().to_string();
    return loaded.is_ok() ? std::move(loaded).value() : nullptr;
}

// Checkpoints inside a chunk (lane_span::checkpoints): each copy is bitwise the
// state a token-by-token run holds after that position, and taking them changes no
// output bit.
TEST(qwen35, CheckpointCopiesInsideAChunkEqualTheStateTokenByToken) {
    auto loaded = q35_stage(2, 128, 3);
    ASSERT_NE(loaded, nullptr);
    stage & s = *loaded;
    const int64_t n_embd = s.hparams().n_embd;
    const auto ids = sample_ids(70, 300, 11);
    auto embed = [&](int64_t p0, int64_t n) {
        std::vector<float> x(static_cast<size_t>(n * n_embd));
        EXPECT_TRUE(s.slice().embed(std::span<const token_id>(ids).subspan(static_cast<size_t>(p0), static_cast<size_t>(n)), x.data()).is_ok());
        return x;
    };
    // Lane 0: positions [0, 5) alone, then [5, 70) with checkpoints every 16 tokens.
    std::vector<float> head = embed(0, 5), rows = embed(5, 65);
    status st;
    const std::vector<int64_t> every16 = {16, 32, 48, 64};
    const lane_span first{0, 0, 5, every16};
    s.forward_batch(std::span<const lane_span>(&first, 1), head.data(), std::span<status>(&st, 1));
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_TRUE(s.take_captures(0).empty()) << "no checkpoint in [1, 5]";
    const lane_span rest{0, 5, 65, every16};
    s.forward_batch(std::span<const lane_span>(&rest, 1), rows.data(), std::span<status>(&st, 1));
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    std::vector<recurrent_state> caps = s.take_captures(0);
    ASSERT_EQ(caps.size(), 4u);
    EXPECT_TRUE(s.take_captures(0).empty()) << "taken once";
    // Lane 1: token by token, the state compared after each checkpoint position.
    std::vector<float> one_by_one;
    size_t next = 0;
    for (int64_t p = 0; p < 70; ++p) {
        std::vector<float> x = embed(p, 1);
        const lane_span sp{1, p, 1};
        s.forward_batch(std::span<const lane_span>(&sp, 1), x.data(), std::span<status>(&st, 1));
        ASSERT_TRUE(st.is_ok());
        if (p >= 5) one_by_one.insert(one_by_one.end(), x.begin(), x.end());
        if ((p + 1) % 16 == 0) {
            ASSERT_LT(next, caps.size());
            EXPECT_EQ(caps[next].n_tokens(), p + 1);
            const recurrent_state * live = s.lane_recurrent(1);
            ASSERT_NE(live, nullptr);
            ASSERT_EQ(live->floats().size(), caps[next].floats().size());
            EXPECT_EQ(std::memcmp(live->floats().data(), caps[next].floats().data(), live->bytes()), 0) << "checkpoint " << p + 1;
            ++next;
        }
    }
    EXPECT_EQ(next, caps.size());
    EXPECT_TRUE(bitwise_equal(rows, one_by_one)) << "checkpoints change no output bit";
}

// A restore as the cache does it: the KV pages of [0, 32) and the snapshot taken at 32
// (through its byte format) put into another lane, which then continues exactly as the
// lane that computed them.
TEST(qwen35, AKvPrefixWithItsSnapshotContinuesBitwise) {
    auto loaded = q35_stage(1, 64, 2);
    ASSERT_NE(loaded, nullptr);
    stage & s = *loaded;
    const int64_t n_embd = s.hparams().n_embd;
    const auto ids = sample_ids(44, 300, 21);
    std::vector<float> out(44 * static_cast<size_t>(n_embd));
    std::vector<float> x(out.size());
    ASSERT_TRUE(s.slice().embed(ids, x.data()).is_ok());
    status st;
    const std::vector<int64_t> at32 = {32};
    const lane_span all{0, 0, 44, at32};
    s.forward_batch(std::span<const lane_span>(&all, 1), x.data(), std::span<status>(&st, 1));
    ASSERT_TRUE(st.is_ok());
    std::vector<recurrent_state> caps = s.take_captures(0);
    ASSERT_EQ(caps.size(), 1u);
    const recurrent_shape shape = s.slice().recurrent_shape_of();
    snapshot_namespace ns{};
    ns.fill(0x5a);
    auto bytes = encode_recurrent_snapshot(caps[0], shape, ns);
    ASSERT_TRUE(bytes.is_ok()) << bytes.error().to_string();
    EXPECT_EQ(bytes->size(), recurrent_snapshot_bytes(shape));

    auto page = export_page(s.lane_kv(0), 0, 8, 0, 32);
    ASSERT_TRUE(page.is_ok());
    // The two attention layers (3 and 7) keep KV; the recurrent ones none.
    EXPECT_EQ(s.kv().geometry().n_layers, 2);
    ASSERT_TRUE(import_page(s.lane_kv(1), *page, kv_page_geometry{0, 8, s.hparams().kv_dim(), kv_dtype::f16, 2}).is_ok());
    recurrent_state restored;
    ASSERT_TRUE(decode_recurrent_snapshot(*bytes, shape, ns, 32, restored).is_ok());
    // A state that does not sit at the lane's KV length is refused.
    recurrent_state early = restored;
    early.set_n_tokens(31);
    EXPECT_FALSE(s.set_lane_recurrent(1, early).is_ok());
    ASSERT_TRUE(s.set_lane_recurrent(1, restored).is_ok());
    EXPECT_EQ(s.lane_recurrent_tokens(1), 32);

    std::vector<float> tail(12 * static_cast<size_t>(n_embd));
    ASSERT_TRUE(s.forward(1, 32, std::span<const token_id>(ids).subspan(32), {}, 12, tail).is_ok());
    EXPECT_TRUE(bitwise_equal(tail, std::vector<float>(x.begin() + 32 * n_embd, x.end())));
}

}  // namespace
}  // namespace skippy::testing
