// Whole-model identity across the kernel paths: on every shared model, the logits of a
// prompt evaluated as one batch (the matrix-matrix products, AMX tiles where the CPU
// has them) and in small chunks (the matrix-vector products of decode) are bitwise the
// same on the scalar reference and on every faster path this CPU runs. Paths the CPU
// lacks are named on stdout and not run.
#include "common/test_data.h"
#include "kernels/kernels.h"
#include "kernels/type_kernels.h"
#include "model_fixture.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace skippy::testing {
namespace {

using kernels::implementation;

std::shared_ptr<const gguf::file> open_model_file(const std::string & path) {
    auto f = gguf::file::open(path);
    EXPECT_TRUE(f.is_ok()) << f.error().to_string();
    if (!f.is_ok()) return nullptr;
    return std::shared_ptr<const gguf::file>(std::move(f).value());
}

class kernel_paths : public ::testing::TestWithParam<std::string> {};

TEST_P(kernel_paths, LogitsAreBitwiseTheSameOnEveryPath) {
    const std::string name = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(model_path, "models/" + name + ".gguf");
    auto file = open_model_file(model_path);
    ASSERT_NE(file, nullptr);
    auto hp = model_hparams::from_gguf(*file);
    ASSERT_TRUE(hp.is_ok()) << hp.error().to_string();
    // 41 tokens: two full 16-token tiles plus a tail in one batch; chunks of 5 take the
    // decode-shaped products.
    const std::vector<token_id> ids = sample_ids(41, hp->n_vocab, 17);
    const implementation before = kernels::active_impl();
    kernels::set_active_impl(implementation::scalar);
    const auto reference_batch = eval_logits(file, ids, {0, 2, kv_dtype::f16});
    const auto reference_chunks = eval_logits(file, ids, {5, 2, kv_dtype::f16});
    ASSERT_FALSE(reference_batch.empty());
    EXPECT_TRUE(bitwise_equal(reference_batch, reference_chunks)) << "chunked evaluation differs on the scalar path";
    int n_paths = 0;
    for (implementation impl : kernels::k_all_implementations) {
        if (impl == implementation::scalar) continue;
        if (!kernels::cpu_supports(impl)) {
            std::printf("%s path not run: this CPU lacks %s\n", kernels::implementation_name(impl),
                        kernels::missing_cpu_features(impl));
            continue;
        }
        kernels::set_active_impl(impl);
        EXPECT_TRUE(bitwise_equal(eval_logits(file, ids, {0, 2, kv_dtype::f16}), reference_batch))
            << name << ": one batch on the " << kernels::implementation_name(impl) << " path";
        EXPECT_TRUE(bitwise_equal(eval_logits(file, ids, {5, 1, kv_dtype::f16}), reference_batch))
            << name << ": chunks of 5 on the " << kernels::implementation_name(impl) << " path";
        ++n_paths;
    }
    kernels::set_active_impl(before);
    std::printf("%s: %d fast paths equal the scalar reference\n", name.c_str(), n_paths);
}

INSTANTIATE_TEST_SUITE_P(shared, kernel_paths,
                         ::testing::Values("stories260K", "synth-llama-f32", "synth-llama-F16", "synth-llama-BF16",
                                           "synth-llama-Q8_0", "synth-llama-Q4_0", "synth-llama-Q4_K-pure",
                                           "synth-llama-Q4_K_M", "synth-llama-Q6_K", "synth-qwen2-f32",
                                           "synth-qwen2-Q8_0", "synth-qwen2-Q4_K_M", "synth-llama-Q5_0",
                                           "synth-llama-Q5_1", "synth-llama-Q5_K_M", "synth-llama-Q3_K_M",
                                           "synth-llama-Q2_K", "synth-llama-IQ4_NL", "synth-llama-IQ4_XS",
                                           "synth-llama3-f32", "synth-llama3-Q4_K_M", "synth-qwen3-f32",
                                           "synth-qwen3-Q4_K_M", "synth-gemma3-f32", "synth-gemma3-Q4_K_M",
                                           "synth-phi3-f32", "synth-phi3-Q4_K_M", "synth-qwen3moe-f32",
                                           "synth-qwen3moe-Q4_K_M", "synth-qwen35-f32", "synth-gptoss-f32",
                                           "synth-gptoss-MXFP4"),
                         [](const auto & param_info) {
                             std::string s = param_info.param;
                             for (char & c : s) {
                                 if (c == '-') c = '_';
                             }
                             return s;
                         });

}  // namespace
}  // namespace skippy::testing
