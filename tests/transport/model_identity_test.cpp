// transport::model_identity: which tensors' bytes make a stage's identity (the cache
// keys KV under it, so two stages share entries exactly when they run the same weights).
#include "transport/stage_cache_host.h"

#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace skippy::transport {
namespace {

const char * const k_names[] = {
    "token_embd.weight",
    "blk.0.attn_q.weight",
    "blk.1.attn_q.weight",
    "blk.x.attn_q.weight",            // looks like a block's, names no layer
    "blk.99999999999.attn_q.weight",  // an index past int32
    "output.weight",
};

// A file of F32 tensors of 4 values each, each tensor its own; `changed` gets other
// values (same size and place, so only the tensor's bytes differ). (The identity is of
// bytes: the namespace adds the layer range.)
std::unique_ptr<gguf::file> file_with(const std::string & changed = "") {
    gguf::writer w;
    float index = 1.0f;
    for (const char * name : k_names) {
        const float v = name == changed ? 100.0f + index : index;
        index += 1.0f;
        const float values[4] = {v, v, v, v};
        std::vector<uint8_t> data(sizeof(values));
        std::memcpy(data.data(), values, sizeof(values));
        w.add_tensor(name, {4}, tensor_type::f32, std::move(data));
    }
    auto f = gguf::file::from_bytes(w.to_bytes());
    EXPECT_TRUE(f.is_ok()) << f.error().message();
    return std::move(f).value();
}

TEST(model_identity, EachStageHasItsLayersBytesAndTheSharedOnes) {
    const auto base = file_with();
    const std::string first = model_identity(*base, {0, 1}), second = model_identity(*base, {1, 2});
    EXPECT_NE(first, second);
    EXPECT_EQ(first, model_identity(*file_with(), {0, 1}));  // deterministic

    // A layer's bytes change its stage's identity and not the other's.
    const auto layer1 = file_with("blk.1.attn_q.weight");
    EXPECT_EQ(model_identity(*layer1, {0, 1}), first);
    EXPECT_NE(model_identity(*layer1, {1, 2}), second);
    const auto layer0 = file_with("blk.0.attn_q.weight");
    EXPECT_NE(model_identity(*layer0, {0, 1}), first);
    EXPECT_EQ(model_identity(*layer0, {1, 2}), second);

    // Embeddings and head are in every stage's identity.
    for (const char * shared : {"token_embd.weight", "output.weight"}) {
        const auto f = file_with(shared);
        EXPECT_NE(model_identity(*f, {0, 1}), first) << shared;
        EXPECT_NE(model_identity(*f, {1, 2}), second) << shared;
    }
}

TEST(model_identity, NamesThatOnlyLookLikeABlocksBelongToNoLayer) {
    // No stage runs them, so their bytes are in no stage's identity (an atoll of "x"
    // read 0 and put blk.x in layer 0's).
    const auto base = file_with();
    for (const char * odd : {"blk.x.attn_q.weight", "blk.99999999999.attn_q.weight"}) {
        const auto f = file_with(odd);
        EXPECT_EQ(model_identity(*f, {0, 1}), model_identity(*base, {0, 1})) << odd;
        EXPECT_EQ(model_identity(*f, {1, 2}), model_identity(*base, {1, 2})) << odd;
        EXPECT_EQ(model_identity(*f, {0, 2}), model_identity(*base, {0, 2})) << odd;
    }
}

}  // namespace
}  // namespace skippy::transport
