#include "common/test_data.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace skippy::gguf {
namespace {

TEST(gguf_shared, Stories260KHasTheExpectedShape) {
    SKIPPY_REQUIRE_TEST_FILE(path, "models/stories260K.gguf");
    auto f = file::open(path);
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    EXPECT_EQ((*f)->version(), 3u);
    EXPECT_EQ((*f)->get_string("general.architecture"), "llama");
    EXPECT_EQ((*f)->get_int("llama.block_count"), 5);
    EXPECT_EQ((*f)->get_int("llama.embedding_length"), 64);
    EXPECT_EQ((*f)->tensors().size(), 48u);
    const tensor_info * embd = (*f)->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->dims, (std::vector<int64_t>{64, 512}));
    EXPECT_EQ(embd->type, tensor_type::f32);
    EXPECT_EQ((*f)->find("tokenizer.ggml.tokens")->as_array()->size(), 512u);
}

TEST(gguf_shared, EverySharedModelAndVocabularyOpens) {
    SKIPPY_REQUIRE_TEST_FILE(models, "models");
    SKIPPY_REQUIRE_TEST_FILE(vocab, "vocab");
    int n_opened = 0;
    for (const auto & dir : {models, vocab}) {
        for (const auto & entry : std::filesystem::directory_iterator(dir)) {
            if (entry.path().extension() != ".gguf") continue;
            auto f = file::open(entry.path().string());
            EXPECT_TRUE(f.is_ok()) << entry.path() << ": " << f.error().to_string();
            ++n_opened;
        }
    }
    EXPECT_GE(n_opened, 18);
}

}  // namespace
}  // namespace skippy::gguf
