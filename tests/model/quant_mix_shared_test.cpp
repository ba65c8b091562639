// make-model's per-tensor types against llama-quantize's: the shared synth-llama files
// (quantized by llama.cpp from the f32 model) hold, tensor by tensor, the type
// type_for_weight gives that tensor in the mix of the same name, and the same
// general.file_type; so do the mixtures of experts' files (8 experts: llama-quantize's
// Q8_0 attn_k/attn_v and Q5_K attn_output; MXFP4 experts), their routers left F32.
#include "common/test_data.h"

#include "gguf/gguf.h"
#include "model/quant_mix.h"

#include <gtest/gtest.h>

#include <string>

namespace skippy::testing {
namespace {

struct shared_file {
    const char * model;  // models/<model>-<file_name>.gguf
    const char * file_name;
    const char * mix;
};

class shared_mix : public ::testing::TestWithParam<shared_file> {};

TEST_P(shared_mix, EveryTensorHasTheTypeLlamaQuantizeGaveIt) {
    const std::string name = GetParam().mix;
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/") + GetParam().model + "-" + GetParam().file_name + ".gguf");
    auto opened = gguf::file::open(path);
    ASSERT_TRUE(opened.is_ok()) << opened.error().to_string();
    const gguf::file & f = **opened;
    auto mix = parse_quant_mix(name);
    ASSERT_TRUE(mix.is_ok()) << name;
    EXPECT_EQ(f.get_int("general.file_type"), static_cast<int64_t>(mix->file_type));
    const auto arch = f.get_string("general.architecture");
    ASSERT_TRUE(arch);
    const std::string p = *arch + ".";
    const auto n_layer = f.get_int(p + "block_count");
    const auto n_head = f.get_int(p + "attention.head_count");
    const auto n_head_kv = f.get_int(p + "attention.head_count_kv");
    const int32_t n_expert = static_cast<int32_t>(f.get_int(p + "expert_count").value_or(0));
    ASSERT_TRUE(n_layer && n_head && n_head_kv);
    const bool tied = f.find_tensor("output.weight") == nullptr;
    int n_checked = 0;
    for (const auto & t : f.tensors()) {
        const bool experts = t.dims.size() == 3 && t.name.find("_exps.weight") != std::string::npos;
        if ((t.dims.size() != 2 && !experts) || !t.name.ends_with(".weight")) continue;  // not biases
        if (t.name.find("ffn_gate_inp") != std::string::npos) {  // the router: never quantized
            EXPECT_EQ(tensor_type_name(t.type), std::string("F32")) << t.name;
            continue;
        }
        int32_t il = -1;
        if (t.name.rfind("blk.", 0) == 0) il = std::stoi(t.name.substr(4));
        const weight_slot slot{t.name, il, static_cast<int32_t>(*n_layer), t.dims[0],
                               static_cast<int32_t>(*n_head / *n_head_kv), tied, n_expert};
        EXPECT_EQ(tensor_type_name(type_for_weight(*mix, slot)), tensor_type_name(t.type)) << name << " " << t.name;
        ++n_checked;
    }
    EXPECT_EQ(n_checked, 2 + 7 * static_cast<int>(*n_layer));
}

INSTANTIATE_TEST_SUITE_P(
    shared, shared_mix,
    ::testing::Values(shared_file{"synth-llama", "Q5_0", "Q5_0"}, shared_file{"synth-llama", "Q5_1", "Q5_1"},
                      shared_file{"synth-llama", "Q5_K_M", "Q5_K_M"}, shared_file{"synth-llama", "Q3_K_M", "Q3_K_M"},
                      shared_file{"synth-llama", "Q2_K", "Q2_K"}, shared_file{"synth-llama", "IQ4_NL", "IQ4_NL"},
                      shared_file{"synth-llama", "IQ4_XS", "IQ4_XS"}, shared_file{"synth-llama", "Q4_0", "Q4_0"},
                      shared_file{"synth-llama", "Q8_0", "Q8_0"}, shared_file{"synth-llama", "Q4_K_M", "Q4_K_M"},
                      shared_file{"synth-llama", "Q6_K", "Q6_K"}, shared_file{"synth-qwen3moe", "Q4_K_M", "Q4_K_M"},
                      shared_file{"synth-gptoss", "MXFP4", "MXFP4_MOE"}),
    [](const auto & p) {
        std::string s = std::string(p.param.model) + "_" + p.param.file_name;
        for (char & ch : s) if (ch == '-') ch = '_';
        return s;
    });

}  // namespace
}  // namespace skippy::testing
