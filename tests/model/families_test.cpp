// The families' metadata and tensors: what each reads, the defaults it applies, and
// the bad input it refuses at load (naming the key or tensor). Synthetic models built
// in memory; the shared golden files check the arithmetic against llama.cpp.
#include "model_fixture.h"

#include <cmath>
#include <cstring>

namespace skippy::testing {
namespace {

synthetic_model_options small(const std::string & arch) {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 64; o.n_layer = 6; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    return o;
}

gguf::writer writer_for(const synthetic_model_options & o) {
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok()) << w.error().to_string();
    return std::move(w).value();
}

std::vector<uint8_t> f32_bytes(const std::vector<float> & v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

status bind_status(const gguf::writer & w) {
    auto file = parse(w);
    if (!file) return make_error(error_code::internal, "unparsable");
    auto s = model_slice::bind(file, {0, static_cast<int32_t>(*file->get_int(*file->get_string("general.architecture") + ".block_count"))});
    return s.is_ok() ? status::ok() : s.error();
}

model_hparams hparams_of(const gguf::writer & w) {
    auto file = parse(w);
    auto hp = model_hparams::from_gguf(*file);
    EXPECT_TRUE(hp.is_ok()) << hp.error().to_string();
    return hp.is_ok() ? *hp : model_hparams{};
}

// Logits of ids through one whole slice bound with `options`.
std::vector<float> slice_logits(std::shared_ptr<const gguf::file> file, const std::vector<token_id> & ids, slice_options options) {
    auto hp = model_hparams::from_gguf(*file);
    auto s = model_slice::bind(file, {0, hp->n_layer}, options);
    EXPECT_TRUE(s.is_ok()) << s.error().to_string();
    if (!s.is_ok()) return {};
    kv_pool pool((*s)->kv_geometry_for(kv_dtype::f16), 8);
    kv_sequence kv(pool);
    forward_workspace ws;
    std::vector<float> x(ids.size() * static_cast<size_t>(hp->n_embd)), logits(ids.size() * static_cast<size_t>(hp->n_vocab));
    EXPECT_TRUE((*s)->embed(ids, x.data()).is_ok());
    EXPECT_TRUE((*s)->forward_layers(x.data(), static_cast<int64_t>(ids.size()), 0, kv, nullptr, ws).is_ok());
    (*s)->head(x.data(), static_cast<int64_t>(ids.size()), logits.data(), nullptr, ws);
    return logits;
}

TEST(families, Qwen3HeadSizeComesFromKeyLength) {
    const auto hp = hparams_of(writer_for(small("qwen3")));
    EXPECT_EQ(hp.arch, model_arch::qwen3);
    EXPECT_EQ(hp.head_dim, 32) << "synthetic qwen3 doubles n_embd / n_head, as Qwen3-0.6B";
    EXPECT_EQ(hp.q_dim(), 128);
    EXPECT_EQ(hp.rope.mode, rope_mode::neox);
    EXPECT_EQ(hp.rope.n_rot, 32);
    EXPECT_FALSE(hp.has_qkv_bias);
}

TEST(families, Gemma3DefaultsToFiveSlidingLayersThenOneGlobal) {
    auto o = small("gemma3");
    o.n_layer = 12;
    o.sliding_window = 10;
    const auto hp = hparams_of(writer_for(o));
    EXPECT_EQ(hp.n_swa, 10);
    for (int32_t il = 0; il < 12; ++il) {
        EXPECT_EQ(hp.layer_kinds[static_cast<size_t>(il)], il % 6 == 5 ? layer_kind::attention : layer_kind::sliding_attention) << il;
    }
    EXPECT_FLOAT_EQ(hp.rope.freq_base, 1e6f);
    EXPECT_FLOAT_EQ(hp.rope_swa.freq_base, 1e4f);
    EXPECT_FLOAT_EQ(hp.rope_swa.freq_scale, 1.0f);
    EXPECT_FLOAT_EQ(hp.embd_scale, 8.0f);
    EXPECT_EQ(hp.rope.mode, rope_mode::neox);
}

TEST(families, Gemma3PatternAndBaseFromTheFile) {
    auto w = writer_for(small("gemma3"));
    w.set("gemma3.attention.sliding_window_pattern", gguf::value::make_u32(3));
    w.set("gemma3.rope.freq_base_swa", gguf::value::make_f32(5000.0f));
    auto hp = hparams_of(w);
    for (int32_t il = 0; il < 6; ++il) {
        EXPECT_EQ(hp.layer_kinds[static_cast<size_t>(il)], il % 3 == 2 ? layer_kind::attention : layer_kind::sliding_attention) << il;
    }
    EXPECT_FLOAT_EQ(hp.rope_swa.freq_base, 5000.0f);
    // One bool per layer.
    std::vector<gguf::value> flags;
    for (int il = 0; il < 6; ++il) flags.push_back(gguf::value::make_bool(il == 1));
    w.set("gemma3.attention.sliding_window_pattern", gguf::value::make_array(gguf::value_type::boolean, flags));
    hp = hparams_of(w);
    for (int32_t il = 0; il < 6; ++il) {
        EXPECT_EQ(hp.layer_kinds[static_cast<size_t>(il)], il == 1 ? layer_kind::sliding_attention : layer_kind::attention) << il;
    }
    flags.pop_back();
    w.set("gemma3.attention.sliding_window_pattern", gguf::value::make_array(gguf::value_type::boolean, flags));
    EXPECT_EQ(bind_status(w).code(), error_code::invalid_data) << "a pattern array must cover every layer";
    // Without a window every layer is global.
    auto g = writer_for(small("gemma3"));
    g.set("gemma3.attention.sliding_window", gguf::value::make_u32(0));
    hp = hparams_of(g);
    for (layer_kind k : hp.layer_kinds) EXPECT_EQ(k, layer_kind::attention);
}

TEST(families, Phi3IgnoresTheConvertersSlidingWindow) {
    const auto hp = hparams_of(writer_for(small("phi3")));
    EXPECT_EQ(hp.arch, model_arch::phi3);
    EXPECT_EQ(hp.n_swa, 0);
    for (layer_kind k : hp.layer_kinds) EXPECT_EQ(k, layer_kind::attention);
    EXPECT_EQ(hp.rope.mode, rope_mode::neox);
}

TEST(families, UnknownArchitectureNamesTheKey) {
    auto w = writer_for(small("llama"));
    w.set("general.architecture", gguf::value::make_string("mamba"));
    const status st = bind_status(w);
    EXPECT_EQ(st.code(), error_code::unsupported);
    EXPECT_NE(st.message().find("general.architecture"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("gemma3"), std::string::npos) << "lists what is supported: " << st.message();
}

TEST(families, MissingFamilyTensorsAreRefusedByName) {
    const struct {
        const char * arch;
        const char * tensor;
    } cases[] = {{"qwen3", "blk.2.attn_k_norm.weight"},     {"gemma3", "blk.0.post_attention_norm.weight"},
                 {"gemma3", "blk.5.post_ffw_norm.weight"},   {"gemma3", "blk.1.attn_q_norm.weight"},
                 {"phi3", "blk.3.attn_qkv.weight"},          {"phi3", "blk.0.ffn_up.weight"},
                 {"qwen2", "blk.1.attn_v.bias"}};
    for (const auto & c : cases) {
        auto full = parse(writer_for(small(c.arch)));
        ASSERT_NE(full->find_tensor(c.tensor), nullptr) << c.tensor;
        const status st = bind_status(copy_without(*full, c.tensor));
        EXPECT_EQ(st.code(), error_code::invalid_data) << c.arch << " " << c.tensor;
        EXPECT_NE(st.message().find(c.tensor), std::string::npos) << st.message();
    }
}

TEST(families, UnimplementedScalingIsRefusedByKey) {
    auto w = writer_for(small("qwen3"));
    w.set("qwen3.rope.scaling.type", gguf::value::make_string("longrope"));
    status st = bind_status(w);
    EXPECT_EQ(st.code(), error_code::unsupported);
    EXPECT_NE(st.message().find("qwen3.rope.scaling.type"), std::string::npos) << st.message();
    auto y = writer_for(small("llama"));
    y.set("llama.rope.scaling.type", gguf::value::make_string("yarn"));
    y.set("llama.rope.scaling.factor", gguf::value::make_f32(4.0f));
    EXPECT_TRUE(bind_status(y).is_ok());
    y.set("llama.rope.scaling.yarn_log_multiplier", gguf::value::make_f32(0.1f));
    st = bind_status(y);
    EXPECT_EQ(st.code(), error_code::unsupported);
    EXPECT_NE(st.message().find("llama.rope.scaling.yarn_log_multiplier"), std::string::npos) << st.message();
}

TEST(families, BadRopeFactorsAreRefused) {
    auto full = parse(writer_for(small("llama3")));
    ASSERT_NE(full->find_tensor("rope_freqs.weight"), nullptr);
    auto w = copy_without(*full, "rope_freqs.weight");
    w.add_tensor("rope_freqs.weight", {4}, tensor_type::f32, f32_bytes({1, 1, 1, 1}));
    status st = bind_status(w);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("rope_freqs.weight"), std::string::npos) << st.message();
    auto z = copy_without(*full, "rope_freqs.weight");
    z.add_tensor("rope_freqs.weight", {8}, tensor_type::f32, f32_bytes({1, 1, 1, 0, 1, 1, 1, 1}));
    EXPECT_EQ(bind_status(z).code(), error_code::invalid_data) << "a zero factor";
    auto p = writer_for(small("phi3"));
    p.add_tensor("rope_factors_long.weight", {4}, tensor_type::f32, f32_bytes({1, 2, 3, 4}));
    EXPECT_EQ(bind_status(p).code(), error_code::invalid_data) << "long factors without short ones";
}

// Phi-3's long factors serve a per-sequence context above the original one, the short
// factors any other, each exactly like a file carrying it as rope_freqs.weight.
TEST(families, Phi3PicksLongOrShortFactorsByContext) {
    auto o = small("phi3");
    o.n_layer = 2;
    o.n_ctx = 64;  // rope.scaling.original_context_length
    auto base = parse(writer_for(o));
    const std::vector<float> shorts = {1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f}, longs = {1, 3, 5, 9, 17, 33, 65, 129};
    auto both_w = copy_without(*base, "");
    both_w.add_tensor("rope_factors_short.weight", {8}, tensor_type::f32, f32_bytes(shorts));
    both_w.add_tensor("rope_factors_long.weight", {8}, tensor_type::f32, f32_bytes(longs));
    auto as_freqs = [&](const std::vector<float> & f) {
        auto w = copy_without(*base, "");
        w.add_tensor("rope_freqs.weight", {8}, tensor_type::f32, f32_bytes(f));
        return parse(w);
    };
    auto both = parse(both_w);
    const std::vector<token_id> ids = {1, 40, 80, 120, 160, 200, 240, 280, 20, 60};
    const auto short_logits = slice_logits(both, ids, {64});
    const auto long_logits = slice_logits(both, ids, {65});
    EXPECT_EQ(short_logits, slice_logits(as_freqs(shorts), ids, {}));
    EXPECT_EQ(long_logits, slice_logits(as_freqs(longs), ids, {}));
    EXPECT_NE(short_logits, long_logits);
    EXPECT_NE(short_logits, slice_logits(base, ids, {})) << "the factors change the result";
}

// gelu_gated against the tanh form in double precision.
TEST(families, GeluGatedIsTheTanhFormOfGelu) {
    std::vector<float> g, u;
    for (int i = -400; i <= 400; ++i) {
        g.push_back(static_cast<float>(i) / 25.0f);
        u.push_back(1.0f + static_cast<float>(i % 7) / 8.0f);
    }
    std::vector<float> out(g.size());
    kernels::gelu_gated(g.data(), u.data(), out.data(), static_cast<int64_t>(g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
        const double x = g[i];
        const double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
        EXPECT_NEAR(out[i], want, 2e-6 * std::max(1.0, std::abs(want))) << "x = " << x;
    }
}

}  // namespace
}  // namespace skippy::testing
