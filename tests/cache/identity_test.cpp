// Identities: namespace isolation by every field, unambiguous encoding, page ids.
#include "cache/identity.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

namespace skippy::cache {
namespace {

namespace_fields base_fields() {
    namespace_fields f;
    f.model_identity = "sha256:abc";
    f.stage_index = 1;
    f.layer_start = 4;
    f.layer_end = 8;
    f.dtype = kv_dtype::f16;
    f.kv_layout = 1;
    f.kv_block_tokens = 16;
    f.ctx_size = 4096;
    f.platform_tag = "x86_64-avx2";
    f.cache_key = "";
    f.token_start = 0;
    return f;
}

digest256 hash_of(const namespace_fields & f) {
    auto ns = make_namespace(f);
    EXPECT_TRUE(ns.is_ok());
    return ns->hash;
}

TEST(identity, EveryFieldChangesTheNamespace) {
    const digest256 base = hash_of(base_fields());
    EXPECT_EQ(hash_of(base_fields()), base);  // deterministic
    std::vector<std::function<void(namespace_fields &)>> changes = {
        [](namespace_fields & f) { f.model_identity = "sha256:abd"; },
        [](namespace_fields & f) { f.stage_index = 2; },
        [](namespace_fields & f) { f.layer_start = 3; },
        [](namespace_fields & f) { f.layer_end = 9; },
        [](namespace_fields & f) { f.dtype = kv_dtype::f32; },
        [](namespace_fields & f) { f.kv_layout = 2; },
        [](namespace_fields & f) { f.kv_block_tokens = 32; },
        [](namespace_fields & f) { f.ctx_size = 2048; },
        [](namespace_fields & f) { f.platform_tag = "x86_64-scalar"; },
        [](namespace_fields & f) { f.cache_key = "tenant-a"; },
        [](namespace_fields & f) { f.token_start = 5; },
    };
    std::set<digest256> seen{base};
    for (auto & change : changes) {
        namespace_fields f = base_fields();
        change(f);
        EXPECT_TRUE(seen.insert(hash_of(f)).second);
    }
}

TEST(identity, FieldsCannotRunTogether) {
    namespace_fields a = base_fields(), b = base_fields();
    a.platform_tag = "ab";
    a.cache_key = "c";
    b.platform_tag = "a";
    b.cache_key = "bc";
    EXPECT_NE(hash_of(a), hash_of(b));
}

TEST(identity, NamespaceHashGolden) {
    // Pinned: a change to the encoding changes every cached identity; update
    // docs/kv-cache.md together with this value.
    EXPECT_EQ(hash_of(base_fields()).hex(), "aaa35c29747fb7b64f295e69863ebbb5ae8373b2670741545d3b725a19247ae9");
    auto ns = *make_namespace(base_fields());
    EXPECT_EQ(prefix_hash(ns, std::vector<token_id>{5, 6, 7, 8}).hex(),
              "6a0a62327eb759138b48c3ef3c305e0bfc93cc1a0bbcebf04f48b2312211266e");
}

TEST(identity, BadFieldsAreRefused) {
    namespace_fields f = base_fields();
    f.model_identity.clear();
    EXPECT_EQ(make_namespace(f).error().code(), error_code::invalid_argument);
    f = base_fields();
    f.layer_end = f.layer_start;
    EXPECT_EQ(make_namespace(f).error().code(), error_code::invalid_argument);
    f = base_fields();
    f.token_start = -1;
    EXPECT_EQ(make_namespace(f).error().code(), error_code::invalid_argument);
}

TEST(identity, NonZeroTokenStartIsRefusedAtUse) {
    namespace_fields f = base_fields();
    f.token_start = 16;
    auto ns = make_namespace(f);
    ASSERT_TRUE(ns.is_ok());
    status st = check_token_start(*ns);
    EXPECT_EQ(st.code(), error_code::unsupported);
    EXPECT_EQ(st.message(), "nonzero_token_start_unsupported");
    EXPECT_TRUE(check_token_start(*make_namespace(base_fields())).is_ok());
}

TEST(identity, PrefixHashDependsOnNamespaceAndEveryToken) {
    auto ns = *make_namespace(base_fields());
    namespace_fields other = base_fields();
    other.cache_key = "k";
    auto ns2 = *make_namespace(other);
    std::vector<token_id> t{1, 2, 3};
    const digest256 h = prefix_hash(ns, t);
    EXPECT_EQ(prefix_hash(ns, t), h);
    EXPECT_NE(prefix_hash(ns2, t), h);
    EXPECT_NE(prefix_hash(ns, std::vector<token_id>{1, 2, 4}), h);
    EXPECT_NE(prefix_hash(ns, std::vector<token_id>{1, 2}), h);
    // More than one encoding chunk (4096 bytes = 1024 tokens).
    std::vector<token_id> big(3000, 7);
    std::vector<token_id> big2 = big;
    big2[2999] = 8;
    EXPECT_NE(prefix_hash(ns, big), prefix_hash(ns, big2));
}

TEST(identity, PageIdHasTheDocumentedShape) {
    auto ns = *make_namespace(base_fields());
    std::vector<token_id> t{5, 6, 7, 8};
    const digest256 h = prefix_hash(ns, t);
    EXPECT_EQ(page_id(ns, 0, 4, h), "1:0:4:4:" + h.hex(8));
    EXPECT_EQ(prefix_page_id(ns, t), "1:0:4:4:" + h.hex(8));
    EXPECT_EQ(h.hex(8).size(), 16u);
}

}  // namespace
}  // namespace skippy::cache
