#include "model_fixture.h"

namespace skippy::testing {
namespace {

gguf::writer minimal_writer(const std::string & arch) {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 64; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok());
    return std::move(w).value();
}

status load(gguf::writer & w, layer_range range = {0, 0}) {
    auto f = gguf::file::from_bytes(w.to_bytes());
    if (!f.is_ok()) return f.error();
    std::shared_ptr<const gguf::file> file(std::move(f).value());
    stage_options so;
    so.layers = range;
    so.n_threads = 1;
    so.ctx_size = 32;
    auto s = stage::load(file, so);
    return s.is_ok() ? status::ok() : s.error();
}

TEST(hparams, ReadsTheSyntheticModelsShape) {
    auto w = minimal_writer("qwen2");
    auto f = gguf::file::from_bytes(w.to_bytes());
    ASSERT_TRUE(f.is_ok());
    auto hp = model_hparams::from_gguf(**f);
    ASSERT_TRUE(hp.is_ok()) << hp.error().to_string();
    EXPECT_EQ(hp->arch, model_arch::qwen2);
    EXPECT_EQ(hp->rope.mode, rope_mode::neox);
    EXPECT_TRUE(hp->has_qkv_bias);
    EXPECT_EQ(hp->n_embd, 64);
    EXPECT_EQ(hp->head_dim, 16);
    EXPECT_EQ(hp->rope.n_rot, 16);
    EXPECT_EQ(hp->kv_dim(), 32);
    EXPECT_EQ(hp->n_vocab, 300);
    EXPECT_EQ(hp->n_ctx_train, 4096);
    EXPECT_FLOAT_EQ(hp->rope.freq_base, 1e6f);
}

TEST(hparams, UnknownArchitectureIsUnsupported) {
    auto w = minimal_writer("llama");
    w.set("general.architecture", gguf::value::make_string("mamba"));
    status st = load(w);
    EXPECT_EQ(st.code(), error_code::unsupported);
}

TEST(hparams, InconsistentHeadCountsAreRefused) {
    auto w = minimal_writer("llama");
    w.set("llama.attention.head_count_kv", gguf::value::make_u32(3));
    EXPECT_EQ(load(w).code(), error_code::invalid_data);
    auto w2 = minimal_writer("llama");
    w2.set("llama.attention.head_count", gguf::value::make_u32(0));
    EXPECT_EQ(load(w2).code(), error_code::invalid_data);
    auto w3 = minimal_writer("llama");
    w3.set("llama.embedding_length", gguf::value::make_string("wide"));
    EXPECT_EQ(load(w3).code(), error_code::invalid_data);
}

TEST(hparams, UnsupportedRopeScalingIsRefused) {
    auto w = minimal_writer("llama");
    w.set("llama.rope.scaling.type", gguf::value::make_string("dynamic"));
    status st = load(w);
    EXPECT_EQ(st.code(), error_code::unsupported);
    EXPECT_NE(st.message().find("llama.rope.scaling.type"), std::string::npos) << st.message();
    auto w2 = minimal_writer("llama");
    w2.set("llama.rope.scaling.type", gguf::value::make_string("linear"));
    w2.set("llama.rope.scaling.factor", gguf::value::make_f32(4.0f));
    auto f = gguf::file::from_bytes(w2.to_bytes());
    auto hp = model_hparams::from_gguf(**f);
    ASSERT_TRUE(hp.is_ok());
    EXPECT_FLOAT_EQ(hp->rope.freq_scale, 0.25f);
}

TEST(hparams, MissingOrMisshapenTensorsAreRefused) {
    auto w = minimal_writer("llama");
    w.add_tensor("blk.5.attn_q.weight", {64, 64}, tensor_type::f32, std::vector<uint8_t>(64 * 64 * 4));
    EXPECT_TRUE(load(w).is_ok()) << "extra tensors are ignored";
    auto w2 = minimal_writer("llama");
    w2.set("llama.block_count", gguf::value::make_u32(3));  // blk.2 does not exist
    status st = load(w2);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("blk.2"), std::string::npos) << st.message();
    auto w3 = minimal_writer("llama");
    w3.set("llama.feed_forward_length", gguf::value::make_u32(64));  // ffn tensors are 128 wide
    st = load(w3);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("ffn"), std::string::npos) << st.message();
}

// A copy of `w` in which tensor `name` is stored as `type` (zero bytes of the right size).
gguf::writer with_tensor_type(gguf::writer & w, const std::string & name, tensor_type type) {
    auto f = gguf::file::from_bytes(w.to_bytes());
    EXPECT_TRUE(f.is_ok());
    gguf::writer out;
    for (const auto & [key, v] : (*f)->metadata()) out.set(key, v);
    for (const auto & t : (*f)->tensors()) {
        if (t.name != name) {
            out.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
            continue;
        }
        out.add_tensor(t.name, t.dims, type, std::vector<uint8_t>(row_bytes(type, t.dims[0]) * static_cast<size_t>(t.n_rows())));
    }
    return out;
}

// A file may hold any type the GGUF reader knows; a weight of a type without kernels
// must be refused at load, naming the tensor and the type.
TEST(hparams, WeightOfATypeWithoutKernelsIsRefusedByName) {
    auto base = minimal_writer("llama");
    auto w = with_tensor_type(base, "blk.1.ffn_down.weight", tensor_type::q8_1);
    status st = load(w);
    EXPECT_EQ(st.code(), error_code::unsupported);
    EXPECT_NE(st.message().find("blk.1.ffn_down.weight"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("Q8_1"), std::string::npos) << st.message();
}

TEST(hparams, LayerRangesBindOnlyTheirTensors) {
    auto w = minimal_writer("llama");
    EXPECT_TRUE(load(w, {0, 1}).is_ok());
    EXPECT_TRUE(load(w, {1, 2}).is_ok());
    EXPECT_EQ(load(w, {1, 3}).code(), error_code::invalid_argument);
    EXPECT_EQ(load(w, {1, 1}).code(), error_code::invalid_argument);
}

}  // namespace
}  // namespace skippy::testing
