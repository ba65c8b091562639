// make-model's per-tensor types against llama-quantize's: the shared synth-llama files
// (quantized by llama.cpp from the f32 model) hold, tensor by tensor, the type
// type_for_weight gives that tensor in the mix of the same name, and the same
// general.file_type.
#include "common/test_data.h"

#include "gguf/gguf.h"
#include "model/quant_mix.h"

#include <gtest/gtest.h>

#include <string>

namespace skippy::testing {
namespace {

class shared_mix : public ::testing::TestWithParam<const char *> {};

TEST_P(shared_mix, EveryTensorHasTheTypeLlamaQuantizeGaveIt) {
    const std::string name = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(path, "models/synth-llama-" + name + ".gguf");
    auto opened = gguf::file::open(path);
    ASSERT_TRUE(opened.is_ok()) << opened.error().to_string();
    const gguf::file & f = **opened;
    auto mix = parse_quant_mix(name);
    ASSERT_TRUE(mix.is_ok()) << name;
    EXPECT_EQ(f.get_int("general.file_type"), static_cast<int64_t>(mix->file_type));
    const auto n_layer = f.get_int("llama.block_count");
    const auto n_head = f.get_int("llama.attention.head_count");
    const auto n_head_kv = f.get_int("llama.attention.head_count_kv");
    ASSERT_TRUE(n_layer && n_head && n_head_kv);
    const bool tied = f.find_tensor("output.weight") == nullptr;
    int n_checked = 0;
    for (const auto & t : f.tensors()) {
        if (t.dims.size() != 2) continue;
        int32_t il = -1;
        if (t.name.rfind("blk.", 0) == 0) il = std::stoi(t.name.substr(4));
        const weight_slot slot{t.name, il, static_cast<int32_t>(*n_layer), t.dims[0],
                               static_cast<int32_t>(*n_head / *n_head_kv), tied};
        EXPECT_EQ(tensor_type_name(type_for_weight(*mix, slot)), tensor_type_name(t.type)) << name << " " << t.name;
        ++n_checked;
    }
    EXPECT_EQ(n_checked, 2 + 7 * static_cast<int>(*n_layer));
}

INSTANTIATE_TEST_SUITE_P(shared, shared_mix,
                         ::testing::Values("Q5_0", "Q5_1", "Q5_K_M", "Q3_K_M", "Q2_K", "IQ4_NL", "IQ4_XS", "Q4_0", "Q8_0",
                                           "Q4_K_M", "Q6_K"),
                         [](const auto & p) { return std::string(p.param); });

}  // namespace
}  // namespace skippy::testing
