// KV page export/import on a tiny pool: 2 layers, kv_dim 2, f32, block_tokens 4,
// 5 blocks. The golden page below is the worked example of docs/kv-cache.md.
#include "kv/kv_page.h"

#include <openssl/evp.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace skippy {
namespace {

kv_geometry two_layer_geometry() {
    kv_geometry g;
    g.n_layers = 2;
    g.kv_dim = 2;
    g.block_tokens = 4;
    g.dtype = kv_dtype::f32;
    return g;
}

// The stage these pages belong to runs layers [3, 5).
const kv_page_geometry page_geometry{3, 5, 2, kv_dtype::f32};

// K(il, p) = {il*100 + p*10, il*100 + p*10 + 1}; V = -K.
void fill(kv_sequence & s, int64_t n_tokens, float bias = 0.0f) {
    ASSERT_TRUE(s.prepare_write(s.n_tokens(), n_tokens - s.n_tokens()).is_ok());
    for (int32_t il = 0; il < 2; ++il) {
        for (int64_t p = 0; p < n_tokens; ++p) {
            float k[2] = {static_cast<float>(il * 100 + p * 10) + bias, static_cast<float>(il * 100 + p * 10 + 1) + bias};
            float v[2] = {-k[0], -k[1]};
            std::memcpy(s.k_row(il, p), k, sizeof(k));
            std::memcpy(s.v_row(il, p), v, sizeof(v));
        }
    }
}

std::string hex(const uint8_t * p, size_t n) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < n; ++i) {
        out += digits[p[i] >> 4];
        out += digits[p[i] & 15];
    }
    return out;
}

// The same page as an older build wrote it: `version` (1 or 2) and a SHA-256 checksum.
std::vector<uint8_t> with_sha256_checksum(const std::vector<uint8_t> & page, uint8_t version) {
    std::vector<uint8_t> out(page.begin(), page.end() - static_cast<std::ptrdiff_t>(kv_page_checksum_bytes));
    out[8] = version;
    if (version == 1) std::memset(out.data() + 28, 0, 4);
    const size_t body = out.size();
    out.resize(body + kv_page_sha256_checksum_bytes);
    unsigned int n = 0;
    EXPECT_EQ(EVP_Digest(out.data(), body, out.data() + body, &n, EVP_sha256(), nullptr), 1);
    return out;
}

bool same_rows(const kv_sequence & a, const kv_sequence & b, int64_t n_tokens) {
    const size_t row = a.pool().geometry().row_bytes();
    for (int32_t il = 0; il < a.pool().geometry().n_layers; ++il) {
        for (int64_t p = 0; p < n_tokens; ++p) {
            if (std::memcmp(a.k_row(il, p), b.k_row(il, p), row) != 0) return false;
            if (std::memcmp(a.v_row(il, p), b.v_row(il, p), row) != 0) return false;
        }
    }
    return true;
}

TEST(kv_page, GoldenBytesOfATwoTokenPage) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence s(pool);
    fill(s, 5);
    auto page = export_page(s, 3, 5, 1, 2);
    ASSERT_TRUE(page.is_ok()) << page.error().to_string();
    ASSERT_EQ(page->size(), 56u + 64u + 4u);
    EXPECT_EQ(page->size(), kv_page_bytes(page_geometry, 2));
    // header: magic, version 3, layout 1, dtype 0 (f32), layers [3,5), kv_dim 2, both
    // layers with KV, token_start 1, token_count 2, payload 64
    EXPECT_EQ(hex(page->data(), 56),
              "534b50594b565047" "0300" "0100" "00" "000000" "03000000" "05000000" "02000000" "02000000"
              "0100000000000000" "0200000000000000" "4000000000000000");
    // layer 0, K rows of positions 1 and 2: 10.0f 11.0f 20.0f 21.0f
    EXPECT_EQ(hex(page->data() + 56, 16), "00002041000030410000a0410000a841");
    EXPECT_EQ(hex(page->data() + 120, 4), "bd4e6e2c");  // CRC-32C, little-endian
}

TEST(kv_page, ExportThenImportReproducesTheRowsByteForByte) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 7);
    // Two pages: [0,4) and [4,7); the second starts inside dst's second block.
    auto a = export_page(src, 3, 5, 0, 4);
    auto b = export_page(src, 3, 5, 4, 3);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    ASSERT_TRUE(import_page(dst, *a, page_geometry).is_ok());
    EXPECT_EQ(dst.n_tokens(), 4);
    ASSERT_TRUE(import_page(dst, *b, page_geometry).is_ok());
    EXPECT_EQ(dst.n_tokens(), 7);
    EXPECT_TRUE(same_rows(src, dst, 7));
}

TEST(kv_page, FlippedByteIsAnIntegrityErrorAndNothingIsWritten) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 4);
    auto page = export_page(src, 3, 5, 0, 4);
    ASSERT_TRUE(page.is_ok());
    for (size_t i = 56; i < page->size(); i += 7) {
        std::vector<uint8_t> bad = *page;
        bad[i] ^= 0x01;
        status st = import_page(dst, bad, page_geometry);
        EXPECT_EQ(st.code(), error_code::integrity) << "byte " << i;
        EXPECT_EQ(dst.n_tokens(), 0);
    }
    EXPECT_EQ(pool.n_free(), 4);
}

TEST(kv_page, EveryTruncationIsRefusedWithoutACrash) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 3);
    auto page = export_page(src, 3, 5, 0, 3);
    ASSERT_TRUE(page.is_ok());
    for (size_t n = 0; n < page->size(); ++n) {
        status st = import_page(dst, std::span<const uint8_t>(page->data(), n), page_geometry);
        EXPECT_FALSE(st.is_ok()) << n;
        EXPECT_EQ(dst.n_tokens(), 0);
    }
}

TEST(kv_page, HeaderFieldsAreCheckedBeforeUse) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 2);
    auto page = export_page(src, 3, 5, 0, 2);
    ASSERT_TRUE(page.is_ok());
    auto with = [&](size_t offset, uint8_t value) {
        std::vector<uint8_t> p = *page;
        p[offset] = value;
        return import_page(dst, p, page_geometry).code();
    };
    EXPECT_EQ(with(0, 'X'), error_code::invalid_data);   // magic
    EXPECT_EQ(with(8, 4), error_code::unsupported);      // version 4
    EXPECT_EQ(with(8, 2), error_code::invalid_data);     // version 2 has a 32-byte checksum
    EXPECT_EQ(with(8, 1), error_code::invalid_data);     // version 1 too
    EXPECT_EQ(with(10, 7), error_code::unsupported);     // layout 7
    EXPECT_EQ(with(12, 9), error_code::invalid_data);    // dtype 9
    EXPECT_EQ(with(13, 1), error_code::invalid_data);    // reserved
    EXPECT_EQ(with(27, 0x80), error_code::invalid_data); // kv_dim negative
    EXPECT_EQ(with(28, 0), error_code::invalid_data);    // no KV layer
    EXPECT_EQ(with(28, 3), error_code::invalid_data);    // 3 KV layers in a range of 2
    EXPECT_EQ(with(40, 3), error_code::invalid_data);    // token_count 3 vs payload of 2
    EXPECT_EQ(with(47, 0x7f), error_code::invalid_data); // token_count huge: no allocation
    EXPECT_EQ(with(48, 0), error_code::invalid_data);    // payload_bytes
    EXPECT_EQ(dst.n_tokens(), 0);
}

TEST(kv_page, GeometryMismatchIsRefused) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 2);
    auto page = export_page(src, 3, 5, 0, 2);
    ASSERT_TRUE(page.is_ok());
    EXPECT_EQ(import_page(dst, *page, {2, 4, 2, kv_dtype::f32}).code(), error_code::invalid_data);  // other layers
    EXPECT_EQ(import_page(dst, *page, {3, 5, 2, kv_dtype::f16}).code(), error_code::invalid_data);  // other dtype

    kv_geometry f16 = two_layer_geometry();
    f16.dtype = kv_dtype::f16;
    kv_pool pool16(f16, 5);
    kv_sequence dst16(pool16);
    EXPECT_EQ(import_page(dst16, *page, page_geometry).code(), error_code::invalid_data);  // pool is f16
    EXPECT_EQ(dst16.n_tokens(), 0);
}

TEST(kv_page, ImportRequiresTheSessionToEndWhereThePageStarts) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 6);
    auto tail = export_page(src, 3, 5, 4, 2);
    ASSERT_TRUE(tail.is_ok());
    EXPECT_EQ(import_page(dst, *tail, page_geometry).code(), error_code::invalid_argument);
    EXPECT_EQ(dst.n_tokens(), 0);
}

TEST(kv_page, ExportRefusesRangesOutsideTheSequence) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence s(pool);
    fill(s, 3);
    EXPECT_EQ(export_page(s, 3, 5, 2, 2).error().code(), error_code::invalid_argument);
    EXPECT_EQ(export_page(s, 3, 5, -1, 1).error().code(), error_code::invalid_argument);
    EXPECT_EQ(export_page(s, 3, 4, 0, 1).error().code(), error_code::invalid_argument);  // 1 layer vs the pool's 2
    auto empty = export_page(s, 3, 5, 3, 0);
    ASSERT_TRUE(empty.is_ok());
    EXPECT_EQ(empty->size(), 56u + 4u);
}

TEST(kv_page, ExhaustedPoolLeavesTheSessionAtTokenStart) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 12);  // 3 blocks; 2 free
    auto page = export_page(src, 3, 5, 0, 12);
    ASSERT_TRUE(page.is_ok());
    EXPECT_EQ(import_page(dst, *page, page_geometry).code(), error_code::unavailable);
    EXPECT_EQ(dst.n_tokens(), 0);
    EXPECT_EQ(pool.n_free(), 2);
}

TEST(kv_page, ImportOverASharedPartialBlockCopiesOnWrite) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence owner(pool), s(pool);
    fill(owner, 6);
    // s shares owner's blocks for positions [0,2): [b0: 0 1 | 2 3 owner-only]
    s.share_from(std::span<const kv_block_id>(owner.blocks().data(), 1), 2);
    kv_sequence other(pool);
    fill(other, 6, 0.5f);
    auto page = export_page(other, 3, 5, 2, 2);
    ASSERT_TRUE(page.is_ok());
    ASSERT_TRUE(import_page(s, *page, page_geometry).is_ok());
    float k = 0;
    std::memcpy(&k, owner.k_row(0, 2), 4);
    EXPECT_EQ(k, 20.0f);  // the owner still reads its own row
    std::memcpy(&k, s.k_row(0, 2), 4);
    EXPECT_EQ(k, 20.5f);
}

// A hybrid stage keeps KV for some layers of its range only (docs/kv-cache.md §2): a
// pool of 2 layers for the range [3, 7) writes pages saying so, which import into the
// same geometry and nowhere else.
TEST(kv_page, APageOfAStageWithFewerKvLayersThanItsRange) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 3);
    auto page = export_page(src, 3, 7, 0, 3);
    ASSERT_TRUE(page.is_ok()) << page.error().to_string();
    const kv_page_geometry hybrid{3, 7, 2, kv_dtype::f32, 2};
    EXPECT_EQ(page->size(), kv_page_bytes(hybrid, 3));
    auto h = validate_page(*page);
    ASSERT_TRUE(h.is_ok());
    EXPECT_EQ(h->geometry.n_kv_layers, 2);
    EXPECT_EQ(import_page(dst, *page, kv_page_geometry{3, 7, 2, kv_dtype::f32}).code(), error_code::invalid_data)
        << "a stage keeping KV for all 4 layers";
    EXPECT_EQ(import_page(dst, *page, page_geometry).code(), error_code::invalid_data) << "another range";
    ASSERT_TRUE(import_page(dst, *page, hybrid).is_ok());
    EXPECT_TRUE(same_rows(src, dst, 3));
}

// Version 1 pages (bytes 28..31 reserved, every layer of the range) still import: a
// disk tier written before version 2 stays readable for dense stages.
TEST(kv_page, AVersionOnePageOfEveryLayerStillImports) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 2);
    auto page = export_page(src, 3, 5, 0, 2);
    ASSERT_TRUE(page.is_ok());
    const std::vector<uint8_t> v1 = with_sha256_checksum(*page, 1);
    // Its bytes 28..31 are reserved: a version 1 page (checksum intact) with them set is
    // refused, not read as a count of KV layers.
    std::vector<uint8_t> v1_reserved = with_sha256_checksum(*page, 1);
    v1_reserved[28] = 2;
    {
        const size_t body = v1_reserved.size() - kv_page_sha256_checksum_bytes;
        unsigned int n = 0;
        ASSERT_EQ(EVP_Digest(v1_reserved.data(), body, v1_reserved.data() + body, &n, EVP_sha256(), nullptr), 1);
    }
    auto refused = validate_page(v1_reserved);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.error().code(), error_code::invalid_data);
    EXPECT_NE(refused.error().to_string().find("reserved"), std::string::npos) << refused.error().to_string();
    auto h = validate_page(v1);
    ASSERT_TRUE(h.is_ok()) << h.error().to_string();
    EXPECT_EQ(h->version, 1);
    EXPECT_EQ(h->geometry.kv_layers(), 2);
    ASSERT_TRUE(import_page(dst, v1, page_geometry).is_ok());
    EXPECT_TRUE(same_rows(src, dst, 2));
}

// Version 2 pages (SHA-256 checksums) still import, and their checksum is still checked.
TEST(kv_page, AVersionTwoPageStillImportsAndIsStillChecked) {
    kv_pool pool(two_layer_geometry(), 5);
    kv_sequence src(pool), dst(pool);
    fill(src, 3);
    auto page = export_page(src, 3, 5, 0, 3);
    ASSERT_TRUE(page.is_ok());
    const std::vector<uint8_t> v2 = with_sha256_checksum(*page, 2);
    ASSERT_EQ(v2.size(), page->size() + 28);
    for (size_t i = 56; i < v2.size(); i += 5) {
        std::vector<uint8_t> bad = v2;
        bad[i] ^= 0x10;
        EXPECT_EQ(import_page(dst, bad, page_geometry).code(), error_code::integrity) << "byte " << i;
        EXPECT_EQ(dst.n_tokens(), 0);
    }
    // A version 3 page's short checksum under a version 2 header is a size mismatch.
    std::vector<uint8_t> mislabeled = *page;
    mislabeled[8] = 2;
    EXPECT_EQ(validate_page(mislabeled).error().code(), error_code::invalid_data);
    auto h = validate_page(v2);
    ASSERT_TRUE(h.is_ok()) << h.error().to_string();
    EXPECT_EQ(h->version, 2);
    ASSERT_TRUE(import_page(dst, v2, page_geometry).is_ok());
    EXPECT_TRUE(same_rows(src, dst, 3));
}

}  // namespace
}  // namespace skippy
