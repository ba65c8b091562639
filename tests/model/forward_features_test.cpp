// Forward-pass features the golden files do not exercise: the output head falling back
// to token_embd, and the RoPE metadata (rope.dimension_count below the head size,
// linear scaling, freq_base). The RoPE tests compare against a naive double-precision
// forward pass written here from docs/model.md, independent of src/model, and check
// that the same reference with the key ignored is far off (so a model that ignored the
// key would fail).
#include "model_fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

namespace skippy::testing {
namespace {



// Logits of `ids` run as two stages, layers [0, split) and [split, n_layer), the
// second one holding the head.
std::vector<float> eval_split(std::shared_ptr<const gguf::file> file, const std::vector<token_id> & ids, int32_t split) {
    auto hp = model_hparams::from_gguf(*file);
    EXPECT_TRUE(hp.is_ok());
    if (!hp.is_ok()) return {};
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = static_cast<int32_t>(ids.size()) + 16;
    so.layers = {0, split};
    auto first = stage::load(file, so);
    so.layers = {split, hp->n_layer};
    auto last = stage::load(file, so);
    EXPECT_TRUE(first.is_ok() && last.is_ok());
    if (!first.is_ok() || !last.is_ok()) return {};
    EXPECT_FALSE((*last)->slice().has_embeddings()) << "the last slice binds token_embd only as its head";
    EXPECT_TRUE((*last)->slice().has_head());
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<float> act(static_cast<size_t>(n * hp->n_embd)), hidden(act.size());
    EXPECT_TRUE((*first)->forward(0, 0, ids, {}, n, act).is_ok());
    EXPECT_TRUE((*last)->forward(0, 0, {}, act, n, hidden).is_ok());
    std::vector<float> logits(static_cast<size_t>(n * hp->n_vocab));
    (*last)->logits(hidden, n, logits);
    return logits;
}

class tied_head : public ::testing::TestWithParam<const char *> {};

// Without output.weight the head is token_embd: the logits are bitwise those of the same
// model carrying an explicit copy of token_embd as output.weight, whole and split.
TEST_P(tied_head, FallsBackToTokenEmbd) {
    synthetic_model_options o;
    o.n_embd = 256; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 256; o.n_vocab = 300;
    o.type = GetParam();
    auto untied = synthetic_model(o);
    ASSERT_NE(untied, nullptr);
    const gguf::tensor_info * embd = untied->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);

    auto tied = parse(copy_without(*untied, "output.weight"));
    gguf::writer explicit_w = copy_without(*untied, "output.weight");
    explicit_w.add_tensor("output.weight", embd->dims, embd->type, std::vector<uint8_t>(embd->data, embd->data + embd->n_bytes));
    auto explicit_head = parse(explicit_w);
    ASSERT_NE(tied, nullptr);
    ASSERT_NE(explicit_head, nullptr);
    ASSERT_EQ(tied->find_tensor("output.weight"), nullptr);

    const auto ids = sample_ids(20, o.n_vocab, 777u);
    const auto want = eval_logits(explicit_head, ids, {});
    const auto got = eval_logits(tied, ids, {});
    ASSERT_FALSE(want.empty());
    for (float v : want) ASSERT_TRUE(std::isfinite(v));
    EXPECT_TRUE(bitwise_equal(got, want)) << "whole model";
    EXPECT_TRUE(bitwise_equal(eval_split(tied, ids, 1), want)) << "head on the last of two slices";
    EXPECT_TRUE(bitwise_equal(eval_split(explicit_head, ids, 1), want)) << "explicit head, split";
    // The untied model's own head differs, so the comparison above can tell heads apart.
    EXPECT_FALSE(bitwise_equal(eval_logits(untied, ids, {}), want));
}

INSTANTIATE_TEST_SUITE_P(types, tied_head, ::testing::Values("F32", "Q4_K"));

// ---- naive reference forward pass (double precision) ----

struct reference_rope {
    reference_rope(int32_t n_rot_ = 0, double base_ = 10000, double scale_ = 1) : n_rot(n_rot_), base(base_), scale(scale_) {}
    int32_t n_rot = 0;     // rotated dimensions per head (0: the whole head)
    double  base = 10000;  // freq_base
    double  scale = 1;     // 1 / linear scaling factor
    std::vector<double> factors;  // per-pair divisors of the angle (rope_freqs); empty: none
    // YaRN (docs/model.md): pairs below `low` keep the unscaled angle, above `high` the
    // scaled one, linear between; cos and sin times mscale.
    bool   yarn = false;
    double low = 0, high = 0, mscale = 1;
};

// YaRN's ramp corners and magnitude for a scaling factor and original context, from the
// formulas in docs/model.md.
reference_rope yarn_rope(int32_t n_rot, double base, double factor, double n_ctx_orig, double beta_fast, double beta_slow) {
    reference_rope r;
    r.n_rot = n_rot;
    r.base = base;
    r.scale = 1 / factor;
    r.yarn = true;
    const auto corr_dim = [&](double beta) { return n_rot * std::log(n_ctx_orig / (beta * 2 * M_PI)) / (2 * std::log(base)); };
    r.low = std::max(0.0, std::floor(corr_dim(beta_fast)));
    r.high = std::min(n_rot - 1.0, std::ceil(corr_dim(beta_slow)));
    r.mscale = 1 + 0.1 * std::log(factor);
    return r;
}

std::vector<double> tensor_f64(const gguf::file & f, const std::string & name) {
    const gguf::tensor_info * t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    EXPECT_EQ(t->type, tensor_type::f32) << name;
    std::vector<float> v(static_cast<size_t>(t->n_elements()));
    std::memcpy(v.data(), t->data, v.size() * sizeof(float));
    return std::vector<double>(v.begin(), v.end());
}

// y[r] = sum_c W[r][c] x[c] for W stored [n_cols, n_rows] row by row.
std::vector<double> matvec(const std::vector<double> & w, const std::vector<double> & x) {
    const size_t n_cols = x.size(), n_rows = w.size() / n_cols;
    std::vector<double> y(n_rows, 0.0);
    for (size_t r = 0; r < n_rows; ++r)
        for (size_t c = 0; c < n_cols; ++c) y[r] += w[r * n_cols + c] * x[c];
    return y;
}

std::vector<double> rms_norm(const std::vector<double> & x, const std::vector<double> & w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
    return y;
}

// Rotates pair i of one head by angle pos * scale * base^(-2i / n_rot): llama pairs
// (2i, 2i+1), qwen2 (neox) pairs (i, i + n_rot/2); dimensions from n_rot on stay.
void rope(double * head, int32_t n_rot, bool neox, int64_t pos, const reference_rope & r) {
    for (int32_t i = 0; i < n_rot / 2; ++i) {
        const double extrap = static_cast<double>(pos) * std::pow(r.base, -2.0 * i / n_rot) / (r.factors.empty() ? 1.0 : r.factors[i]);
        double angle = r.scale * extrap, m = 1;
        if (r.yarn) {
            const double ramp = 1 - std::clamp((i - r.low) / std::max(0.001, r.high - r.low), 0.0, 1.0);
            angle = angle * (1 - ramp) + extrap * ramp;
            m = r.mscale;
        }
        const int32_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        const double x0 = head[a], x1 = head[b];
        head[a] = (x0 * std::cos(angle) - x1 * std::sin(angle)) * m;
        head[b] = (x0 * std::sin(angle) + x1 * std::cos(angle)) * m;
    }
}

// Logits [n, n_vocab] of `ids` from position 0 for an F32 model built from `o`.
std::vector<double> reference_logits(const gguf::file & f, const synthetic_model_options & o, const std::vector<token_id> & ids,
                                     const reference_rope & r) {
    const bool neox = o.arch == "qwen2";
    const int32_t hd = o.n_embd / o.n_head, group = o.n_head / o.n_head_kv, n_rot = r.n_rot ? r.n_rot : hd;
    const double eps = *f.get_float(*f.get_string("general.architecture") + ".attention.layer_norm_rms_epsilon");
    const size_t n = ids.size(), E = static_cast<size_t>(o.n_embd);
    const auto embd = tensor_f64(f, "token_embd.weight");
    std::vector<std::vector<double>> x(n);
    for (size_t t = 0; t < n; ++t) x[t].assign(embd.begin() + static_cast<std::ptrdiff_t>(ids[t] * E),
                                               embd.begin() + static_cast<std::ptrdiff_t>((ids[t] + 1) * E));
    for (int32_t il = 0; il < o.n_layer; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        const auto attn_norm = tensor_f64(f, b + "attn_norm.weight"), ffn_norm = tensor_f64(f, b + "ffn_norm.weight");
        const auto wq = tensor_f64(f, b + "attn_q.weight"), wk = tensor_f64(f, b + "attn_k.weight");
        const auto wv = tensor_f64(f, b + "attn_v.weight"), wo = tensor_f64(f, b + "attn_output.weight");
        const auto wg = tensor_f64(f, b + "ffn_gate.weight"), wu = tensor_f64(f, b + "ffn_up.weight");
        const auto wd = tensor_f64(f, b + "ffn_down.weight");
        std::vector<double> bq, bk, bv;
        if (neox) bq = tensor_f64(f, b + "attn_q.bias"), bk = tensor_f64(f, b + "attn_k.bias"), bv = tensor_f64(f, b + "attn_v.bias");
        std::vector<std::vector<double>> q(n), k(n), v(n);
        for (size_t t = 0; t < n; ++t) {
            const auto cur = rms_norm(x[t], attn_norm, eps);
            q[t] = matvec(wq, cur), k[t] = matvec(wk, cur), v[t] = matvec(wv, cur);
            for (size_t i = 0; i < bq.size(); ++i) q[t][i] += bq[i];
            for (size_t i = 0; i < bk.size(); ++i) k[t][i] += bk[i], v[t][i] += bv[i];
            for (int32_t h = 0; h < o.n_head; ++h) rope(&q[t][static_cast<size_t>(h * hd)], n_rot, neox, static_cast<int64_t>(t), r);
            for (int32_t h = 0; h < o.n_head_kv; ++h) rope(&k[t][static_cast<size_t>(h * hd)], n_rot, neox, static_cast<int64_t>(t), r);
        }
        for (size_t t = 0; t < n; ++t) {
            std::vector<double> attn(static_cast<size_t>(o.n_head * hd), 0.0);
            for (int32_t h = 0; h < o.n_head; ++h) {
                const size_t qo = static_cast<size_t>(h * hd), ko = static_cast<size_t>((h / group) * hd);
                std::vector<double> s(t + 1);
                double mx = -INFINITY, sum = 0;
                for (size_t j = 0; j <= t; ++j) {
                    s[j] = 0;
                    for (int32_t i = 0; i < hd; ++i) s[j] += q[t][qo + i] * k[j][ko + i];
                    s[j] /= std::sqrt(static_cast<double>(hd));
                    mx = std::max(mx, s[j]);
                }
                for (size_t j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
                for (size_t j = 0; j <= t; ++j)
                    for (int32_t i = 0; i < hd; ++i) attn[qo + i] += s[j] / sum * v[j][ko + i];
            }
            const auto o_proj = matvec(wo, attn);
            for (size_t i = 0; i < E; ++i) x[t][i] += o_proj[i];
            const auto cur = rms_norm(x[t], ffn_norm, eps);
            auto g = matvec(wg, cur);
            const auto u = matvec(wu, cur);
            for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const auto down = matvec(wd, g);
            for (size_t i = 0; i < E; ++i) x[t][i] += down[i];
        }
    }
    const auto out_norm = tensor_f64(f, "output_norm.weight");
    const auto out = tensor_f64(f, f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight");
    std::vector<double> logits;
    for (size_t t = 0; t < n; ++t) {
        const auto l = matvec(out, rms_norm(x[t], out_norm, eps));
        logits.insert(logits.end(), l.begin(), l.end());
    }
    return logits;
}

double max_abs_diff(const std::vector<float> & a, const std::vector<double> & b) {
    EXPECT_EQ(a.size(), b.size());
    if (a.size() != b.size() || a.empty()) return INFINITY;
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
    return m;
}

// The model's F32 logits (f32 KV) agree with the reference at rope `right` to within
// float rounding, and are far from the reference at rope `wrong` (what a model that
// ignored the metadata under test would compute).
constexpr double k_tolerance = 1e-4;  // observed: about 1.5e-6
constexpr double k_far = 0.5;        // observed: 1.5 to 3.3

struct rope_case {
    synthetic_model_options                   o;
    std::function<void(gguf::writer &)>       edit;  // metadata under test
};

void expect_rope(const rope_case & c, const reference_rope & right, const reference_rope & wrong) {
    auto w = build_synthetic_model(c.o);
    ASSERT_TRUE(w.is_ok()) << w.error().to_string();
    if (c.edit) c.edit(*w);
    auto file = parse(*w);
    ASSERT_NE(file, nullptr);
    const auto ids = sample_ids(24, c.o.n_vocab, 777u);
    const auto got = eval_logits(file, ids, {0, 1, kv_dtype::f32});
    ASSERT_FALSE(got.empty());
    const double err = max_abs_diff(got, reference_logits(*file, c.o, ids, right));
    const double off = max_abs_diff(got, reference_logits(*file, c.o, ids, wrong));
    EXPECT_LT(err, k_tolerance) << "against the reference with the metadata applied";
    EXPECT_GT(off, k_far) << "against the reference with the metadata ignored (error " << err << ")";
}

synthetic_model_options rope_model(const std::string & arch) {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 64; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;  // head_dim 16
    return o;
}

TEST(rope, DefaultsMatchTheReference) {
    // llama: base 1e4, pairs (2i, 2i+1); qwen2: base 1e6 (synthetic default), neox pairs.
    expect_rope({rope_model("llama"), {}}, {0, 1e4, 1}, {0, 1e4, 0.5});
    expect_rope({rope_model("qwen2"), {}}, {0, 1e6, 1}, {0, 1e6, 0.5});
}

TEST(rope, PartialRotaryRotatesOnlyTheFirstDimensions) {
    const auto set_rot = [](const std::string & arch) {
        return [arch](gguf::writer & w) { w.set(arch + ".rope.dimension_count", gguf::value::make_u32(8)); };
    };
    expect_rope({rope_model("llama"), set_rot("llama")}, {8, 1e4, 1}, {16, 1e4, 1});
    expect_rope({rope_model("qwen2"), set_rot("qwen2")}, {8, 1e6, 1}, {16, 1e6, 1});
}

TEST(rope, LinearScalingDividesThePositions) {
    const auto linear = [](gguf::writer & w) {
        w.set("llama.rope.scaling.type", gguf::value::make_string("linear"));
        w.set("llama.rope.scaling.factor", gguf::value::make_f32(4.0f));
    };
    expect_rope({rope_model("llama"), linear}, {0, 1e4, 0.25}, {0, 1e4, 1});
    // Older files say rope.scale_linear.
    const auto old_key = [](gguf::writer & w) { w.set("llama.rope.scale_linear", gguf::value::make_f32(4.0f)); };
    expect_rope({rope_model("llama"), old_key}, {0, 1e4, 0.25}, {0, 1e4, 1});
}

TEST(rope, FreqBaseIsRead) {
    // Mistral-style llama files use a base of 1e6.
    const auto base = [](gguf::writer & w) { w.set("llama.rope.freq_base", gguf::value::make_f32(1e6f)); };
    expect_rope({rope_model("llama"), base}, {0, 1e6, 1}, {0, 1e4, 1});
}

// Llama 3.1+ files carry their RoPE scaling only as rope_freqs.weight: every angle is
// divided by its pair's factor, and ignoring the tensor is far off. (The factors of
// Llama 3.1's formula, which make-model --arch llama3 writes, touch only pairs whose
// wavelength exceeds 2048 positions, too little to tell apart here; these are larger.)
TEST(rope, Llama3FrequencyFactorsDivideTheAngles) {
    auto o = rope_model("llama3");
    auto w = build_synthetic_model(o);
    ASSERT_TRUE(w.is_ok()) << w.error().to_string();
    auto made = parse(*w);
    ASSERT_NE(made, nullptr);
    ASSERT_NE(made->find_tensor("rope_freqs.weight"), nullptr) << "make-model --arch llama3 writes the factors";
    const std::vector<float> factors = {0.25f, 0.5f, 1, 2, 4, 8, 16, 32};
    gguf::writer edited = copy_without(*made, "rope_freqs.weight");
    std::vector<uint8_t> bytes(factors.size() * 4);
    std::memcpy(bytes.data(), factors.data(), bytes.size());
    edited.add_tensor("rope_freqs.weight", {8}, tensor_type::f32, std::move(bytes));
    auto file = parse(edited);
    ASSERT_NE(file, nullptr);
    reference_rope right{0, 5e5, 1};
    right.factors.assign(factors.begin(), factors.end());
    const auto ids = sample_ids(24, o.n_vocab, 777u);
    const auto got = eval_logits(file, ids, {0, 1, kv_dtype::f32});
    EXPECT_LT(max_abs_diff(got, reference_logits(*file, o, ids, right)), k_tolerance);
    EXPECT_GT(max_abs_diff(got, reference_logits(*file, o, ids, {0, 5e5, 1})), k_far);
    // A slice that does not own layer 0 binds the factors too: a split equals the whole.
    EXPECT_TRUE(bitwise_equal(eval_split(file, ids, 1), eval_logits(file, ids, {}))) << "split";
}

TEST(rope, YarnMatchesTheReference) {
    const auto yarn = [](gguf::writer & w) {
        w.set("llama.rope.scaling.type", gguf::value::make_string("yarn"));
        w.set("llama.rope.scaling.factor", gguf::value::make_f32(4.0f));
        w.set("llama.rope.scaling.original_context_length", gguf::value::make_u32(4096));
    };
    const reference_rope right = yarn_rope(16, 1e4, 4, 4096, 32, 1);
    ASSERT_GT(right.high, right.low + 2) << "the ramp spans several pairs";
    expect_rope({rope_model("llama"), yarn}, right, {0, 1e4, 1});
    // Without the ramp (linear scaling, YaRN's magnitude): still far.
    reference_rope no_ramp = right;
    no_ramp.yarn = false;
    expect_rope({rope_model("llama"), yarn}, right, no_ramp);
    // The beta keys move the ramp (to pairs [2, 5] from the defaults' [1, 4]; the
    // tolerance tells them apart); qwen2's NeoX pairs take it the same way.
    const auto betas = [](const std::string & arch) {
        return [arch](gguf::writer & w) {
            w.set(arch + ".rope.scaling.type", gguf::value::make_string("yarn"));
            w.set(arch + ".rope.scaling.factor", gguf::value::make_f32(8.0f));
            w.set(arch + ".rope.scaling.original_context_length", gguf::value::make_u32(4096));
            w.set(arch + ".rope.scaling.yarn_beta_fast", gguf::value::make_f32(4.0f));
            w.set(arch + ".rope.scaling.yarn_beta_slow", gguf::value::make_f32(0.5f));
        };
    };
    const reference_rope moved = yarn_rope(16, 1e6, 8, 4096, 4, 0.5);
    ASSERT_NE(moved.low, yarn_rope(16, 1e6, 8, 4096, 32, 1).low);
    expect_rope({rope_model("qwen2"), betas("qwen2")}, moved, {0, 1e6, 1});
}

TEST(rope, AllTogetherWithATiedHead) {
    // Partial rotary, scaling and base at once, on a model without output.weight.
    auto o = rope_model("llama");
    const auto edit = [](gguf::writer & w) {
        w.set("llama.rope.dimension_count", gguf::value::make_u32(12));
        w.set("llama.rope.scaling.type", gguf::value::make_string("linear"));
        w.set("llama.rope.scaling.factor", gguf::value::make_f32(2.0f));
        w.set("llama.rope.freq_base", gguf::value::make_f32(5e5f));
    };
    auto w = build_synthetic_model(o);
    ASSERT_TRUE(w.is_ok());
    edit(*w);
    auto full = parse(*w);
    ASSERT_NE(full, nullptr);
    auto file = parse(copy_without(*full, "output.weight"));
    ASSERT_NE(file, nullptr);
    const auto ids = sample_ids(24, o.n_vocab, 777u);
    const auto got = eval_logits(file, ids, {0, 1, kv_dtype::f32});
    EXPECT_LT(max_abs_diff(got, reference_logits(*file, o, ids, {12, 5e5, 0.5})), k_tolerance);
    EXPECT_GT(max_abs_diff(got, reference_logits(*file, o, ids, {16, 5e5, 0.5})), k_far);
}

}  // namespace
}  // namespace skippy::testing
