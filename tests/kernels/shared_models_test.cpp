// The shared synthetic models hold the same random weights in every type (quantized by
// llama.cpp from the f32 file). Decoding each file's tensors and comparing with the f32
// file validates our block layouts against real files; re-encoding the f32 weights
// checks our encoders against llama.cpp's.
#include "kernel_test_util.h"

#include "common/test_data.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace skippy::kernels {
namespace {


std::unique_ptr<gguf::file> open_model(const std::string & path) {
    auto f = gguf::file::open(path);
    EXPECT_TRUE(f.is_ok()) << path << ": " << f.error().to_string();
    return f.is_ok() ? std::move(f).value() : nullptr;
}

// All values of a tensor, decoded row by row.
std::vector<float> decode_tensor(const gguf::tensor_info & t) {
    const int64_t n_cols = t.dims[0];
    const size_t rb = row_bytes(t.type, n_cols);
    std::vector<float> out(static_cast<size_t>(t.n_elements()));
    for (int64_t r = 0; r < t.n_rows(); ++r) dequantize_row(t.type, t.data + r * rb, out.data() + r * n_cols, n_cols);
    return out;
}

double relative_rms_error(const std::vector<float> & got, const std::vector<float> & ref) {
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        err2 += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
        ref2 += double(ref[i]) * ref[i];
    }
    return std::sqrt(err2 / ref2);
}

const char * const k_tensors[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                  "blk.0.ffn_gate.weight", "blk.2.attn_output.weight",
                                  "blk.3.ffn_down.weight", "output.weight"};

// Ceiling of RMS(decoded - f32) / RMS(f32) for llama.cpp's encoders on these weights,
// a little above what the files show.
double max_relative_rms(tensor_type t) {
    switch (t) {
        case tensor_type::f16: return 0x1p-11;
        case tensor_type::bf16: return 0x1p-8;
        case tensor_type::q8_0: return 0.007;
        case tensor_type::q4_0: return 0.10;
        case tensor_type::q5_0: return 0.05;
        case tensor_type::q5_1: return 0.042;
        case tensor_type::iq4_nl: return 0.085;
        case tensor_type::mxfp4: return 0.13;
        case tensor_type::q2_k: return 0.32;
        case tensor_type::q3_k: return 0.165;
        case tensor_type::q4_k: return 0.08;
        case tensor_type::q5_k: return 0.04;
        case tensor_type::q6_k: return 0.02;
        case tensor_type::iq4_xs: return 0.085;
        default: return 0.0;
    }
}

// F16, BF16, Q8_0, Q4_0, Q5_0 and Q5_1 files are written by deterministic reference
// encoders that ours reproduce byte for byte.
bool encoder_is_byte_exact(tensor_type t) {
    return t == tensor_type::f16 || t == tensor_type::bf16 || t == tensor_type::q8_0 || t == tensor_type::q4_0 ||
           t == tensor_type::q5_0 || t == tensor_type::q5_1;
}

struct model_case {
    const char * file;
    tensor_type  type;  // of the layer matrices (llama.cpp may pick another for output.weight)
    bool         pure = true;  // false: a mix, layer matrices of several types
};

class shared_model : public ::testing::TestWithParam<model_case> {};

TEST_P(shared_model, DecodedWeightsMatchTheF32Model) {
    SKIPPY_REQUIRE_TEST_FILE(f32_path, "models/synth-llama-f32.gguf");
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/") + GetParam().file);
    auto ref = open_model(f32_path);
    auto model = open_model(path);
    ASSERT_TRUE(ref && model);
    for (const char * name : k_tensors) {
        const gguf::tensor_info * rt = ref->find_tensor(name);
        const gguf::tensor_info * mt = model->find_tensor(name);
        ASSERT_TRUE(rt && mt) << name;
        ASSERT_EQ(rt->dims, mt->dims) << name;
        if (GetParam().pure && std::string(name).rfind("blk.", 0) == 0) {
            EXPECT_EQ(mt->type, GetParam().type) << name;
        }
        ASSERT_TRUE(is_supported(mt->type)) << name;
        const double rel = relative_rms_error(decode_tensor(*mt), decode_tensor(*rt));
        EXPECT_LE(rel, max_relative_rms(mt->type)) << name << " " << tensor_type_name(mt->type);
        EXPECT_GT(rel, 0.0) << name << ": the same bytes as the f32 file?";
        RecordProperty(std::string(name) + "_relative_rms", std::to_string(rel));
    }
}

TEST_P(shared_model, ReEncodingF32WeightsReproducesOrApproachesTheFile) {
    SKIPPY_REQUIRE_TEST_FILE(f32_path, "models/synth-llama-f32.gguf");
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/") + GetParam().file);
    auto ref = open_model(f32_path);
    auto model = open_model(path);
    ASSERT_TRUE(ref && model);
    for (const char * name : k_tensors) {
        const gguf::tensor_info * rt = ref->find_tensor(name);
        const gguf::tensor_info * mt = model->find_tensor(name);
        ASSERT_TRUE(rt && mt) << name;
        const tensor_type t = mt->type;
        const auto want = decode_tensor(*rt);
        const int64_t n_cols = rt->dims[0];
        const size_t rb = row_bytes(t, n_cols);
        ASSERT_EQ(mt->n_bytes, rb * static_cast<size_t>(rt->n_rows())) << name;
        std::vector<uint8_t> ours(mt->n_bytes);
        for (int64_t r = 0; r < rt->n_rows(); ++r) quantize_row(t, want.data() + r * n_cols, ours.data() + r * rb, n_cols);
        if (encoder_is_byte_exact(t)) {
            EXPECT_EQ(std::memcmp(ours.data(), mt->data, mt->n_bytes), 0) << name << " " << tensor_type_name(t);
        } else {
            // K-quants and IQ4: llama.cpp searches for better scales; our plain
            // encoders must stay close to its accuracy.
            std::vector<float> ours_decoded(want.size());
            for (int64_t r = 0; r < rt->n_rows(); ++r) dequantize_row(t, ours.data() + r * rb, ours_decoded.data() + r * n_cols, n_cols);
            const double ours_rel = relative_rms_error(ours_decoded, want);
            const double theirs_rel = relative_rms_error(decode_tensor(*mt), want);
            EXPECT_LE(ours_rel, 1.25 * theirs_rel)
                << name << " " << tensor_type_name(t) << " ours " << ours_rel << " llama.cpp " << theirs_rel;
            RecordProperty(std::string(name) + "_ours_vs_llama_cpp", std::to_string(ours_rel / theirs_rel));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, shared_model,
                         ::testing::Values(model_case{"synth-llama-F16.gguf", tensor_type::f16},
                                           model_case{"synth-llama-BF16.gguf", tensor_type::bf16},
                                           model_case{"synth-llama-Q8_0.gguf", tensor_type::q8_0},
                                           model_case{"synth-llama-Q4_0.gguf", tensor_type::q4_0},
                                           model_case{"synth-llama-Q5_0.gguf", tensor_type::q5_0},
                                           model_case{"synth-llama-Q5_1.gguf", tensor_type::q5_1},
                                           model_case{"synth-llama-IQ4_NL.gguf", tensor_type::iq4_nl},
                                           model_case{"synth-llama-IQ4_XS.gguf", tensor_type::iq4_xs},
                                           model_case{"synth-llama-Q4_K-pure.gguf", tensor_type::q4_k},
                                           model_case{"synth-llama-Q6_K.gguf", tensor_type::q6_k},
                                           model_case{"synth-llama-Q2_K.gguf", tensor_type::q2_k, false},
                                           model_case{"synth-llama-Q3_K_M.gguf", tensor_type::q3_k, false},
                                           model_case{"synth-llama-Q4_K_M.gguf", tensor_type::q4_k, false},
                                           model_case{"synth-llama-Q5_K_M.gguf", tensor_type::q5_k, false}),
                         [](const auto & p) {
                             std::string name = p.param.file;
                             name = name.substr(12, name.size() - 12 - 5);  // between "synth-llama-" and ".gguf"
                             std::replace(name.begin(), name.end(), '-', '_');
                             return name;
                         });

// The K-quant mixes hold several types per file (Q2_K: Q2_K and Q3_K; Q3_K_M: Q3_K,
// Q4_K and Q5_K; Q4_K_M and Q5_K_M: their base type and Q6_K); every tensor must
// decode close to the F32 model.
class shared_mixed_model : public ::testing::TestWithParam<const char *> {};

TEST_P(shared_mixed_model, DecodesEveryTensorCloseToF32) {
    SKIPPY_REQUIRE_TEST_FILE(f32_path, "models/synth-llama-f32.gguf");
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/synth-llama-") + GetParam() + ".gguf");
    auto ref = open_model(f32_path);
    auto model = open_model(path);
    ASSERT_TRUE(ref && model);
    std::vector<tensor_type> seen;
    for (const auto & mt : model->tensors()) {
        const gguf::tensor_info * rt = ref->find_tensor(mt.name);
        ASSERT_NE(rt, nullptr) << mt.name;
        ASSERT_TRUE(is_supported(mt.type)) << mt.name;
        if (std::find(seen.begin(), seen.end(), mt.type) == seen.end()) seen.push_back(mt.type);
        const double rel = relative_rms_error(decode_tensor(mt), decode_tensor(*rt));
        EXPECT_LE(rel, max_relative_rms(mt.type)) << mt.name << " " << tensor_type_name(mt.type);
    }
    EXPECT_GE(seen.size(), 3u) << "F32 norms and at least two weight types";
}

INSTANTIATE_TEST_SUITE_P(kernels, shared_mixed_model, ::testing::Values("Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M"));

// gpt-oss keeps its experts in MXFP4 (3-D tensors, one matrix per expert); decoding
// them matches the F32 model, and re-encoding the F32 experts reproduces the file
// (ggml's reference MXFP4 encoder is deterministic).
TEST(kernels_shared_model_mxfp4, ExpertsDecodeCloseToF32AndReEncodeToTheFileBytes) {
    SKIPPY_REQUIRE_TEST_FILE(f32_path, "models/synth-gptoss-f32.gguf");
    SKIPPY_REQUIRE_TEST_FILE(path, "models/synth-gptoss-MXFP4.gguf");
    auto ref = open_model(f32_path);
    auto model = open_model(path);
    ASSERT_TRUE(ref && model);
    int n_mxfp4 = 0;
    for (const auto & mt : model->tensors()) {
        if (mt.type != tensor_type::mxfp4) continue;
        ++n_mxfp4;
        const gguf::tensor_info * rt = ref->find_tensor(mt.name);
        ASSERT_NE(rt, nullptr) << mt.name;
        const auto want = decode_tensor(*rt);
        const double rel = relative_rms_error(decode_tensor(mt), want);
        EXPECT_LE(rel, max_relative_rms(tensor_type::mxfp4)) << mt.name;
        EXPECT_GT(rel, 0.0) << mt.name;
        const int64_t n_cols = rt->dims[0];
        const size_t rb = row_bytes(tensor_type::mxfp4, n_cols);
        ASSERT_EQ(mt.n_bytes, rb * static_cast<size_t>(rt->n_rows())) << mt.name;
        std::vector<uint8_t> ours(mt.n_bytes);
        for (int64_t r = 0; r < rt->n_rows(); ++r) {
            quantize_row(tensor_type::mxfp4, want.data() + r * n_cols, ours.data() + r * rb, n_cols);
        }
        EXPECT_EQ(std::memcmp(ours.data(), mt.data, mt.n_bytes), 0) << mt.name;
    }
    EXPECT_GE(n_mxfp4, 3);
}

}  // namespace
}  // namespace skippy::kernels
