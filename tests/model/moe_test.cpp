// Mixtures of experts: the router and experts of blocks::moe_ffn against a naive
// double-precision reference written here (both gatings, weight renormalisation, expert
// biases, a shared expert), the metadata and tensors the families refuse at load, and
// make-model's qwen3moe.
#include "model_fixture.h"

#include "model/blocks.h"
#include "model/split_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace skippy::testing {
namespace {

synthetic_model_options moe_model() {
    synthetic_model_options o;
    o.arch = "qwen3moe";
    o.n_embd = 64; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 32; o.n_vocab = 300;
    o.n_expert = 6; o.n_expert_used = 3;
    return o;
}

gguf::writer writer_for(const synthetic_model_options & o) {
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok()) << w.error().to_string();
    return std::move(w).value();
}

status bind_status(const gguf::writer & w) {
    auto file = parse(w);
    if (!file) return make_error(error_code::internal, "unparsable");
    auto s = model_slice::bind(file, {0, 2});
    return s.is_ok() ? status::ok() : s.error();
}

std::vector<float> random_floats(std::mt19937 & rng, size_t n, float amplitude) {
    std::uniform_real_distribution<float> d(-amplitude, amplitude);
    std::vector<float> v(n);
    for (auto & x : v) x = d(rng);
    return v;
}

kernels::matrix_view f32_matrix(const std::vector<float> & v, int64_t n_cols, int64_t n_rows) {
    return {tensor_type::f32, reinterpret_cast<const uint8_t *>(v.data()), n_cols, n_rows};
}

// The weights of one MoE layer, F32, with every optional part.
struct moe_case {
    int32_t n_embd = 32, n_ff = 16, n_expert = 5, n_expert_used = 2, n_ff_sh = 24;
    std::vector<float> router, router_bias, gate, up, down, gate_bias, up_bias, down_bias, sh_gate, sh_up, sh_down, sh_gate_inp;

    explicit moe_case(uint32_t seed) {
        std::mt19937 rng(seed);
        const size_t e = static_cast<size_t>(n_expert), d = static_cast<size_t>(n_embd), f = static_cast<size_t>(n_ff);
        router = random_floats(rng, e * d, 0.5f);
        router_bias = random_floats(rng, e, 0.5f);
        gate = random_floats(rng, e * f * d, 0.3f);
        up = random_floats(rng, e * f * d, 0.3f);
        down = random_floats(rng, e * d * f, 0.3f);
        gate_bias = random_floats(rng, e * f, 0.2f);
        up_bias = random_floats(rng, e * f, 0.2f);
        down_bias = random_floats(rng, e * d, 0.2f);
        const size_t fs = static_cast<size_t>(n_ff_sh);
        sh_gate = random_floats(rng, fs * d, 0.3f);
        sh_up = random_floats(rng, fs * d, 0.3f);
        sh_down = random_floats(rng, d * fs, 0.3f);
        sh_gate_inp = random_floats(rng, d, 0.3f);
    }

    layer_weights weights(bool biases, bool shared) const {
        layer_weights lw;
        moe_weights & m = lw.moe;
        m.router = f32_matrix(router, n_embd, n_expert);
        m.gate = {f32_matrix(gate, n_embd, n_ff), static_cast<size_t>(n_embd * n_ff) * 4};
        m.up = {f32_matrix(up, n_embd, n_ff), static_cast<size_t>(n_embd * n_ff) * 4};
        m.down = {f32_matrix(down, n_ff, n_embd), static_cast<size_t>(n_embd * n_ff) * 4};
        if (biases) {
            m.router_bias = router_bias.data();
            m.gate_bias = gate_bias.data();
            m.up_bias = up_bias.data();
            m.down_bias = down_bias.data();
        }
        if (shared) {
            m.shexp_gate = f32_matrix(sh_gate, n_embd, n_ff_sh);
            m.shexp_up = f32_matrix(sh_up, n_embd, n_ff_sh);
            m.shexp_down = f32_matrix(sh_down, n_ff_sh, n_embd);
            m.shexp_gate_inp = f32_matrix(sh_gate_inp, n_embd, 1);
        }
        return lw;
    }

    model_hparams hparams(expert_gating gating, bool norm) const {
        model_hparams hp;
        hp.n_embd = n_embd;
        hp.n_ff = n_ff;
        hp.moe = {n_expert, n_expert_used, n_ff, n_ff_sh, gating, norm, 0.0f};
        return hp;
    }
};

double dot(const float * a, const float * b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

double silu(double x) { return x / (1 + std::exp(-x)); }

// One row of the MoE FFN in double precision, written from the description in
// docs/model.md rather than from blocks_moe.cpp.
std::vector<double> naive_moe(const moe_case & c, const float * x, expert_gating gating, bool norm, bool biases, bool shared,
                              bool clamped) {
    const int64_t d = c.n_embd, f = c.n_ff;
    std::vector<double> logits(static_cast<size_t>(c.n_expert));
    for (int32_t e = 0; e < c.n_expert; ++e) {
        logits[static_cast<size_t>(e)] = dot(c.router.data() + e * d, x, d) + (biases ? c.router_bias[static_cast<size_t>(e)] : 0.0);
    }
    std::vector<double> probs = logits;
    if (gating == expert_gating::softmax) {
        const double mx = *std::max_element(probs.begin(), probs.end());
        double sum = 0;
        for (auto & p : probs) sum += (p = std::exp(p - mx));
        for (auto & p : probs) p /= sum;
    }
    std::vector<int32_t> order(static_cast<size_t>(c.n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)]; });
    order.resize(static_cast<size_t>(c.n_expert_used));
    std::vector<double> w;
    for (int32_t e : order) w.push_back(probs[static_cast<size_t>(e)]);
    if (gating == expert_gating::softmax_topk) {
        const double mx = w[0];
        double sum = 0;
        for (auto & v : w) sum += (v = std::exp(v - mx));
        for (auto & v : w) v /= sum;
    }
    if (norm) {
        const double sum = std::accumulate(w.begin(), w.end(), 0.0);
        for (auto & v : w) v /= sum;
    }
    std::vector<double> out(static_cast<size_t>(d), 0.0);
    for (size_t j = 0; j < order.size(); ++j) {
        const int64_t e = order[j];
        std::vector<float> h(static_cast<size_t>(f));
        for (int64_t i = 0; i < f; ++i) {
            double g = dot(c.gate.data() + (e * f + i) * d, x, d) + (biases ? c.gate_bias[static_cast<size_t>(e * f + i)] : 0.0);
            double u = dot(c.up.data() + (e * f + i) * d, x, d) + (biases ? c.up_bias[static_cast<size_t>(e * f + i)] : 0.0);
            if (clamped) {
                g = std::min(g, 7.0);
                u = std::clamp(u, -7.0, 7.0);
                h[static_cast<size_t>(i)] = static_cast<float>(g / (1 + std::exp(-1.702 * g)) * (u + 1));
            } else {
                h[static_cast<size_t>(i)] = static_cast<float>(silu(g) * u);
            }
        }
        for (int64_t r = 0; r < d; ++r) {
            const double y = dot(c.down.data() + (e * d + r) * f, h.data(), f) + (biases ? c.down_bias[static_cast<size_t>(e * d + r)] : 0.0);
            out[static_cast<size_t>(r)] += w[j] * y;
        }
    }
    if (shared) {
        const int64_t fs = c.n_ff_sh;
        std::vector<float> h(static_cast<size_t>(fs));
        for (int64_t i = 0; i < fs; ++i) {
            h[static_cast<size_t>(i)] = static_cast<float>(silu(dot(c.sh_gate.data() + i * d, x, d)) * dot(c.sh_up.data() + i * d, x, d));
        }
        const double g = 1 / (1 + std::exp(-dot(c.sh_gate_inp.data(), x, d)));
        for (int64_t r = 0; r < d; ++r) out[static_cast<size_t>(r)] += g * dot(c.sh_down.data() + r * fs, h.data(), fs);
    }
    return out;
}

void clamped_swiglu(const float * g, const float * u, float * o, int64_t n) { kernels::swiglu_clamped(g, u, o, n, 1.702f, 7.0f); }

struct moe_variant {
    const char *  name;
    expert_gating gating;
    bool          norm, biases, shared, clamped;
};

class moe_reference : public ::testing::TestWithParam<moe_variant> {};

// Every row of a 9-row pass against the naive reference; and the reference with the
// variant's feature turned off is far from it, so the comparison can fail.
TEST_P(moe_reference, MoeFfnMatchesNaiveReference) {
    const moe_variant & v = GetParam();
    const moe_case c(7);
    const model_hparams hp = c.hparams(v.gating, v.norm);
    const layer_weights lw = c.weights(v.biases, v.shared);
    const int64_t n = 9;
    std::mt19937 rng(3);
    const auto x = random_floats(rng, static_cast<size_t>(n * c.n_embd), 1.5f);
    std::vector<float> out(x.size());
    forward_workspace ws;
    kernels::thread_pool pool(2);
    const layer_pass p{hp, 0, nullptr, n, {}, {}, ws, &pool};
    blocks::moe_ffn(p, lw, v.clamped ? clamped_swiglu : kernels::swiglu, x.data(), out.data());
    double worst = 0, worst_off = 0;
    for (int64_t t = 0; t < n; ++t) {
        const float * xt = x.data() + t * c.n_embd;
        const auto want = naive_moe(c, xt, v.gating, v.norm, v.biases, v.shared, v.clamped);
        const auto off = naive_moe(c, xt, v.gating, !v.norm, !v.biases, !v.shared, !v.clamped);
        for (int64_t i = 0; i < c.n_embd; ++i) {
            worst = std::max(worst, std::abs(out[static_cast<size_t>(t * c.n_embd + i)] - want[static_cast<size_t>(i)]));
            worst_off = std::max(worst_off, std::abs(out[static_cast<size_t>(t * c.n_embd + i)] - off[static_cast<size_t>(i)]));
        }
    }
    EXPECT_LT(worst, 2e-5) << v.name;
    EXPECT_GT(worst_off, 1e-2) << v.name << ": the reference must notice the feature";

    // Each row alone gives the bits it gave in the pass.
    for (int64_t t = 0; t < n; ++t) {
        std::vector<float> one(static_cast<size_t>(c.n_embd));
        const layer_pass p1{hp, 0, nullptr, 1, {}, {}, ws, nullptr};
        blocks::moe_ffn(p1, lw, v.clamped ? clamped_swiglu : kernels::swiglu, x.data() + t * c.n_embd, one.data());
        EXPECT_EQ(std::memcmp(one.data(), out.data() + t * c.n_embd, one.size() * sizeof(float)), 0) << v.name << " row " << t;
    }
}

INSTANTIATE_TEST_SUITE_P(variants, moe_reference,
                         ::testing::Values(moe_variant{"qwen3moe", expert_gating::softmax, true, false, false, false},
                                           moe_variant{"shared_expert", expert_gating::softmax, false, false, true, false},
                                           moe_variant{"gptoss", expert_gating::softmax_topk, false, true, false, true}),
                         [](const auto & param_info) { return std::string(param_info.param.name); });

TEST(moe, MetadataAndExpertTensorsAreRead) {
    auto file = parse(writer_for(moe_model()));
    auto hp = model_hparams::from_gguf(*file);
    ASSERT_TRUE(hp.is_ok()) << hp.error().to_string();
    EXPECT_EQ(hp->arch, model_arch::qwen3moe);
    EXPECT_EQ(hp->moe.n_expert, 6);
    EXPECT_EQ(hp->moe.n_expert_used, 3);
    EXPECT_EQ(hp->moe.n_ff_exp, 32);
    EXPECT_TRUE(hp->moe.norm_weights) << "qwen3moe renormalises unless the file says otherwise";
    EXPECT_EQ(hp->moe.gating, expert_gating::softmax);
    const auto * t = file->find_tensor("blk.1.ffn_down_exps.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dims, (std::vector<int64_t>{32, 64, 6}));
    EXPECT_TRUE(bind_status(writer_for(moe_model())).is_ok());
}

TEST(moe, MoreExpertsUsedThanExistIsRefusedNamingBothKeys) {
    auto w = writer_for(moe_model());
    w.set("qwen3moe.expert_used_count", gguf::value::make_u32(7));
    const status st = bind_status(w);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("qwen3moe.expert_used_count"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("qwen3moe.expert_count"), std::string::npos) << st.message();
    auto o = moe_model();
    o.n_expert_used = 7;
    EXPECT_FALSE(build_synthetic_model(o).is_ok()) << "make-model refuses it too";
}

TEST(moe, MissingExpertKeysAndTensorsAreRefusedByName) {
    auto full = parse(writer_for(moe_model()));
    for (const char * tensor : {"blk.0.ffn_gate_inp.weight", "blk.1.ffn_up_exps.weight", "blk.0.ffn_gate_exps.weight",
                                "blk.1.ffn_down_exps.weight"}) {
        ASSERT_NE(full->find_tensor(tensor), nullptr) << tensor;
        const status st = bind_status(copy_without(*full, tensor));
        EXPECT_EQ(st.code(), error_code::invalid_data) << tensor;
        EXPECT_NE(st.message().find(tensor), std::string::npos) << st.message();
    }
    gguf::writer w;
    for (const auto & [key, v] : full->metadata()) {
        if (key != "qwen3moe.expert_count") w.set(key, v);
    }
    for (const auto & t : full->tensors()) w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    const status st = bind_status(w);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("qwen3moe.expert_count"), std::string::npos) << st.message();
}

TEST(moe, ExpertShapesDisagreeingWithMetadataAreRefused) {
    // Fewer experts in the metadata than the tensors hold, then a wider expert.
    auto w = writer_for(moe_model());
    w.set("qwen3moe.expert_count", gguf::value::make_u32(4));
    status st = bind_status(w);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("blk.0.ffn_gate_inp.weight"), std::string::npos) << st.message();
    auto full = parse(writer_for(moe_model()));
    auto v = copy_without(*full, "blk.1.ffn_up_exps.weight");
    v.add_tensor("blk.1.ffn_up_exps.weight", {64, 32, 5}, tensor_type::f32, std::vector<uint8_t>(64 * 32 * 5 * 4));
    st = bind_status(v);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("blk.1.ffn_up_exps.weight"), std::string::npos) << st.message();
    auto z = copy_without(*full, "blk.0.ffn_down_exps.weight");
    z.add_tensor("blk.0.ffn_down_exps.weight", {32, 64}, tensor_type::f32, std::vector<uint8_t>(32 * 64 * 4));
    st = bind_status(z);
    EXPECT_EQ(st.code(), error_code::invalid_data) << "a 2-D expert tensor";
    EXPECT_NE(st.message().find("blk.0.ffn_down_exps.weight"), std::string::npos) << st.message();
}

// A file whose layer il holds one F32 tensor of layer_floats[il] values, and a head.
std::shared_ptr<const gguf::file> layered_file(const std::vector<int64_t> & layer_floats, int64_t head_floats) {
    gguf::writer w;
    w.set("general.architecture", gguf::value::make_string("test"));
    for (size_t il = 0; il < layer_floats.size(); ++il) {
        w.add_tensor("blk." + std::to_string(il) + ".w.weight", {layer_floats[il]}, tensor_type::f32,
                     std::vector<uint8_t>(static_cast<size_t>(layer_floats[il]) * 4));
    }
    w.add_tensor("output.weight", {head_floats}, tensor_type::f32, std::vector<uint8_t>(static_cast<size_t>(head_floats) * 4));
    return parse(w);
}

TEST(split_plan, EvenLayersSplitByCountUnevenOnesByBytes) {
    auto even = layered_file({25, 25, 25, 25, 25}, 25);
    auto s = plan_layer_split(*even, 5, 2, split_balance::weight_bytes);
    ASSERT_TRUE(s.is_ok());
    EXPECT_FALSE(s->by_bytes);
    ASSERT_EQ(s->stages.size(), 2u);
    EXPECT_EQ(s->stages[0].end, 3) << "the first stages take the remainder";
    EXPECT_EQ(s->stage_bytes, (std::vector<int64_t>{300, 300}));

    // Bytes 100 100 400 100 100 100 and a head of 100: [0, 3) and [3, 6) weigh 600 and
    // 400; any other cut has a heavier stage.
    auto uneven = layered_file({25, 25, 100, 25, 25, 25}, 25);
    s = plan_layer_split(*uneven, 6, 2, split_balance::weight_bytes);
    ASSERT_TRUE(s.is_ok());
    EXPECT_TRUE(s->by_bytes);
    ASSERT_EQ(s->stages.size(), 2u);
    EXPECT_EQ(s->stages[0].start, 0);
    EXPECT_EQ(s->stages[0].end, 3);
    EXPECT_EQ(s->stages[1].end, 6);
    EXPECT_EQ(s->stage_bytes, (std::vector<int64_t>{600, 400}));

    // One heavy layer at the end gets a stage of its own; every stage has a layer.
    auto heavy = layered_file({25, 25, 25, 25, 1000}, 25);
    s = plan_layer_split(*heavy, 5, 3, split_balance::weight_bytes);
    ASSERT_TRUE(s.is_ok());
    ASSERT_EQ(s->stages.size(), 3u);
    EXPECT_EQ(s->stages[2].start, 4);
    for (const auto & r : s->stages) EXPECT_LT(r.start, r.end);
    EXPECT_EQ(s->stages[0].start, 0);
    EXPECT_EQ(s->stages[0].end, s->stages[1].start);
    EXPECT_EQ(s->stages[1].end, 4);
    s = plan_layer_split(*heavy, 5, 5, split_balance::weight_bytes);
    ASSERT_TRUE(s.is_ok());
    for (int32_t i = 0; i < 5; ++i) EXPECT_EQ(s->stages[static_cast<size_t>(i)].start, i);
    EXPECT_FALSE(plan_layer_split(*heavy, 5, 6, split_balance::weight_bytes).is_ok()) << "more stages than layers";
}

// Balanced by compute, a stage counts multiply-adds per token (elements), not bytes: 6
// layers of 64 Q8_0 weights (68 bytes each) and an F32 head of 128 (512 bytes, two
// layers' work). By bytes the equal layers split 3 + 3 (the second stage holding the
// head: 5 layers' work against 3); by compute 4 + 2, 4 layers' work each. An expert
// tensor counts its top-k share: layer 0's 256 expert weights with 2 of 8 experts used
// are 64 multiply-adds.
TEST(split_plan, ByComputeCountsMultiplyAddsPerToken) {
    auto layers = [](bool experts) {
        gguf::writer w;
        w.set("general.architecture", gguf::value::make_string("test"));
        if (experts) {
            w.set("test.expert_count", gguf::value::make_u32(8));
            w.set("test.expert_used_count", gguf::value::make_u32(2));
        }
        for (int il = 0; il < 6; ++il) {
            // Two Q8_0 blocks of 34 bytes.
            w.add_tensor("blk." + std::to_string(il) + ".w.weight", {64}, tensor_type::q8_0, std::vector<uint8_t>(2 * 34));
        }
        if (experts) w.add_tensor("blk.0.ffn_up_exps.weight", {32, 2, 4}, tensor_type::f32, std::vector<uint8_t>(256 * 4));
        w.add_tensor("output.weight", {128}, tensor_type::f32, std::vector<uint8_t>(128 * 4));
        return parse(w);
    };
    auto f = layers(false);
    auto by_bytes = plan_layer_split(*f, 6, 2, split_balance::weight_bytes);
    ASSERT_TRUE(by_bytes.is_ok());
    EXPECT_FALSE(by_bytes->by_compute);
    EXPECT_EQ(by_bytes->stages[0].end, 3);
    EXPECT_EQ(by_bytes->stage_multiply_adds, (std::vector<int64_t>{192, 320}));
    auto by_compute = plan_layer_split(*f, 6, 2, split_balance::compute);
    ASSERT_TRUE(by_compute.is_ok());
    EXPECT_TRUE(by_compute->by_compute);
    EXPECT_EQ(by_compute->stages[0].end, 4);
    EXPECT_EQ(by_compute->stage_multiply_adds, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(by_compute->stage_bytes, (std::vector<int64_t>{4 * 68, 2 * 68 + 512}));

    auto moe = layers(true);
    auto split = plan_layer_split(*moe, 6, 2, split_balance::compute);
    ASSERT_TRUE(split.is_ok());
    ASSERT_EQ(split->stage_multiply_adds.size(), 2u);
    EXPECT_EQ(split->stage_multiply_adds[0] + split->stage_multiply_adds[1], 6 * 64 + 64 + 128);
    // Layer 0 weighs 128, the head 128: [0, 3) + [3, 6) and [0, 4) + [4, 6) both have a
    // heaviest stage of 320; the last stage takes what fits.
    EXPECT_EQ(split->stages[0].end, 3);
    EXPECT_EQ(split->stage_multiply_adds, (std::vector<int64_t>{256, 320}));
}

}  // namespace
}  // namespace skippy::testing
