// The recurrent-state snapshot format (docs/kv-cache.md §2, "Recurrent-state
// snapshot"): golden bytes of a tiny snapshot, a round trip, and every refusal on
// decode — which never touches the state it would have written.
#include "model/recurrent_snapshot.h"

#include <openssl/evp.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace skippy {
namespace {

// Layers [4, 6) of which one is recurrent; d_conv 2 (one stored input per channel),
// 2 channels, one v head of d_state 1: 3 floats.
recurrent_shape tiny_shape() {
    recurrent_shape s;
    s.layer_start = 4;
    s.layer_end = 6;
    s.n_layers = 1;
    s.d_conv = 2;
    s.conv_channels = 2;
    s.d_state = 1;
    s.n_v_head = 1;
    return s;
}

recurrent_state tiny_state(int64_t n_tokens = 64) {
    recurrent_state st(1, 2, 1);
    const float v[3] = {1.0f, 2.0f, -0.5f};
    std::memcpy(st.floats().data(), v, sizeof(v));
    st.set_n_tokens(n_tokens);
    return st;
}

snapshot_namespace ns_of(uint8_t b) {
    snapshot_namespace ns{};
    ns.fill(b);
    return ns;
}

std::string hex(std::span<const uint8_t> b) {
    std::string out;
    char buf[3];
    for (uint8_t c : b) {
        std::snprintf(buf, sizeof(buf), "%02x", c);
        out += buf;
    }
    return out;
}

std::vector<uint8_t> tiny_bytes() {
    auto b = encode_recurrent_snapshot(tiny_state(), tiny_shape(), ns_of(0x11));
    EXPECT_TRUE(b.is_ok()) << b.error().to_string();
    return b.is_ok() ? *b : std::vector<uint8_t>{};
}

TEST(recurrent_snapshot, GoldenBytesOfAThreeFloatSnapshot) {
    const std::vector<uint8_t> b = tiny_bytes();
    ASSERT_EQ(b.size(), 112u);
    EXPECT_EQ(b.size(), recurrent_snapshot_bytes(tiny_shape()));
    const std::string header =
        "534b505952534e50" "0200" "0000" "00000000"       // SKPYRSNP, v2, f32, reserved
        + std::string(64, '1') +                          // namespace 32 x 11
        "04000000" "06000000" "01000000" "02000000"       // layers [4, 6), 1 recurrent, d_conv 2
        "02000000" "01000000" "01000000" "00000000"       // 2 channels, d_state 1, 1 v head, reserved
        "4000000000000000" "0c00000000000000";            // 64 tokens, payload 12
    EXPECT_EQ(hex(std::span<const uint8_t>(b).first(96)), header);
    EXPECT_EQ(hex(std::span<const uint8_t>(b).subspan(96, 12)), "0000803f" "00000040" "000000bf");  // 1, 2, -0.5
    EXPECT_EQ(hex(std::span<const uint8_t>(b).subspan(108)), "c87d73ed");  // CRC-32C, little-endian
}

// Version 1 (a SHA-256 checksum) is still read, and still checked: a snapshot a disk
// tier kept from an older build restores.
TEST(recurrent_snapshot, AVersionOneSnapshotStillDecodesAndIsStillChecked) {
    const std::vector<uint8_t> v2 = tiny_bytes();
    std::vector<uint8_t> v1(v2.begin(), v2.end() - static_cast<std::ptrdiff_t>(recurrent_snapshot_checksum_bytes));
    v1[8] = 1;
    const size_t body = v1.size();
    v1.resize(body + recurrent_snapshot_sha256_checksum_bytes);
    unsigned int n = 0;
    ASSERT_EQ(EVP_Digest(v1.data(), body, v1.data() + body, &n, EVP_sha256(), nullptr), 1);
    recurrent_state out;
    ASSERT_TRUE(decode_recurrent_snapshot(v1, tiny_shape(), ns_of(0x11), 64, out).is_ok());
    EXPECT_EQ(std::memcmp(out.floats().data(), tiny_state().floats().data(), 12), 0);
    for (size_t at : {size_t{100}, body + 5}) {
        std::vector<uint8_t> bad = v1;
        bad[at] ^= 0x04;
        EXPECT_EQ(validate_recurrent_snapshot(bad).error().code(), error_code::integrity) << at;
    }
    std::vector<uint8_t> mislabeled = v2;
    mislabeled[8] = 1;
    EXPECT_EQ(validate_recurrent_snapshot(mislabeled).error().code(), error_code::invalid_data) << "a 4-byte checksum under v1";
}

TEST(recurrent_snapshot, RoundTripsTheStateBitwise) {
    const std::vector<uint8_t> b = tiny_bytes();
    recurrent_state out;
    ASSERT_TRUE(decode_recurrent_snapshot(b, tiny_shape(), ns_of(0x11), 64, out).is_ok());
    EXPECT_EQ(out.n_tokens(), 64);
    ASSERT_TRUE(out.has_shape(tiny_shape()));
    EXPECT_EQ(std::memcmp(out.floats().data(), tiny_state().floats().data(), 12), 0);
    recurrent_state any;
    EXPECT_TRUE(decode_recurrent_snapshot(b, tiny_shape(), ns_of(0x11), -1, any).is_ok()) << "-1: any token count";
    auto h = validate_recurrent_snapshot(b);
    ASSERT_TRUE(h.is_ok());
    EXPECT_EQ(h->shape, tiny_shape());
    EXPECT_EQ(h->n_tokens, 64);
    EXPECT_EQ(h->payload_bytes, 12u);
}

TEST(recurrent_snapshot, EncodingRefusesAStateOfAnotherShapeOrWithoutAPrefix) {
    recurrent_state wrong(1, 4, 1);
    EXPECT_EQ(encode_recurrent_snapshot(wrong, tiny_shape(), ns_of(1)).error().code(), error_code::invalid_argument);
    recurrent_state invalid = tiny_state();
    invalid.invalidate();
    EXPECT_EQ(encode_recurrent_snapshot(invalid, tiny_shape(), ns_of(1)).error().code(), error_code::invalid_argument);
}

// Each damaged or foreign snapshot is refused with its class, and the state the decode
// would have replaced keeps its bits.
TEST(recurrent_snapshot, DecodeRefusesWhatIsNotTheSnapshotAskedFor) {
    const std::vector<uint8_t> good = tiny_bytes();
    auto refused = [&](std::vector<uint8_t> b, const recurrent_shape & shape, const snapshot_namespace & ns, int64_t n) {
        recurrent_state kept = tiny_state(7);
        const status st = decode_recurrent_snapshot(b, shape, ns, n, kept);
        EXPECT_EQ(kept.n_tokens(), 7) << "untouched";
        EXPECT_EQ(std::memcmp(kept.floats().data(), tiny_state().floats().data(), 12), 0);
        return st.is_ok() ? error_code::ok : st.code();
    };
    const recurrent_shape shape = tiny_shape();
    const snapshot_namespace ns = ns_of(0x11);
    EXPECT_EQ(refused(std::vector<uint8_t>(good.begin(), good.begin() + 100), shape, ns, 64), error_code::invalid_data) << "truncated";
    EXPECT_EQ(refused({}, shape, ns, 64), error_code::invalid_data) << "empty";
    auto patched = [&](size_t at, uint8_t v) {
        std::vector<uint8_t> b = good;
        b[at] = v;
        return b;
    };
    EXPECT_EQ(refused(patched(0, 'X'), shape, ns, 64), error_code::invalid_data) << "magic";
    EXPECT_EQ(refused(patched(8, 3), shape, ns, 64), error_code::unsupported) << "version";
    EXPECT_EQ(refused(patched(10, 1), shape, ns, 64), error_code::unsupported) << "dtype";
    EXPECT_EQ(refused(patched(12, 1), shape, ns, 64), error_code::invalid_data) << "reserved";
    EXPECT_EQ(refused(patched(76, 1), shape, ns, 64), error_code::invalid_data) << "reserved";
    EXPECT_EQ(refused(patched(56, 0), shape, ns, 64), error_code::invalid_data) << "no recurrent layer";
    EXPECT_EQ(refused(patched(88, 13), shape, ns, 64), error_code::invalid_data) << "payload size";
    EXPECT_EQ(refused(patched(100, 0x81), shape, ns, 64), error_code::integrity) << "a flipped payload byte";
    EXPECT_EQ(refused(patched(good.size() - 1, good.back() ^ 1), shape, ns, 64), error_code::integrity) << "checksum";
    // Whole and intact, but not the one asked for.
    EXPECT_EQ(refused(good, shape, ns_of(0x12), 64), error_code::invalid_data) << "another namespace";
    recurrent_shape other = shape;
    other.layer_start = 3;
    EXPECT_EQ(refused(good, other, ns, 64), error_code::invalid_data) << "another layer range";
    other = shape;
    other.conv_channels = 4;
    EXPECT_EQ(refused(good, other, ns, 64), error_code::invalid_data) << "another shape";
    EXPECT_EQ(refused(good, shape, ns, 63), error_code::invalid_data) << "another position";
}

}  // namespace
}  // namespace skippy
