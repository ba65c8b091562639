// Malformed GGUF images: every one must be refused with a status, never a crash, an
// assertion or an allocation sized by a lying count (run these under ASan).
#include "base/byte_io.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

namespace skippy::gguf {
namespace {

std::vector<uint8_t> valid_image() {
    writer w;
    w.set("general.architecture", value::make_string("llama"));
    w.set("tokens", value::make_string_array({"<unk>", "a", "b"}));
    w.set("scores", value::make_f32_array({0.f, -1.f, -2.f}));
    std::vector<uint8_t> data(8 * 4, 0);
    w.add_tensor("w", {8}, tensor_type::f32, data);
    w.add_tensor("q", {32, 2}, tensor_type::q8_0, std::vector<uint8_t>(2 * 34, 0));
    return w.to_bytes();
}

// Hand-encodes a header with arbitrary (possibly absurd) fields.
struct image {
    std::vector<uint8_t> bytes;
    byte_writer          w{bytes};
    image(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
        w.put_bytes("GGUF", 4);
        w.put_u32(version);
        w.put_u64(n_tensors);
        w.put_u64(n_kv);
    }
    void str(const std::string & s) { w.put_u64(s.size()); w.put_bytes(s.data(), s.size()); }
    void kv_u32(const std::string & key, uint32_t v) { str(key); w.put_u32(4); w.put_u32(v); }
    void tensor(const std::string & name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
        str(name);
        w.put_u32(static_cast<uint32_t>(dims.size()));
        for (auto d : dims) w.put_u64(d);
        w.put_u32(type);
        w.put_u64(offset);
    }
    void pad_to(size_t alignment) { w.put_zeros((alignment - bytes.size() % alignment) % alignment); }
};

status parse(const std::vector<uint8_t> & bytes) {
    auto f = file::from_bytes(bytes);
    return f.is_ok() ? status::ok() : f.error();
}

TEST(gguf_malformed, ValidImageParses) { EXPECT_TRUE(parse(valid_image()).is_ok()); }

TEST(gguf_malformed, EveryTruncationBeforeTheLastTensorByteIsRefused) {
    const auto full = valid_image();
    auto f = file::from_bytes(full);
    ASSERT_TRUE(f.is_ok());
    size_t needed = 0;
    for (const auto & t : (*f)->tensors()) needed = std::max<size_t>(needed, (*f)->data_offset() + t.offset + t.n_bytes);
    for (size_t len = 0; len < needed; ++len) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
        status st = parse(cut);
        EXPECT_FALSE(st.is_ok()) << "truncated at " << len << " bytes was accepted";
        EXPECT_FALSE(st.message().empty());
    }
}

TEST(gguf_malformed, BadMagicIsRefused) {
    auto bytes = valid_image();
    bytes[0] = 'X';
    status st = parse(bytes);
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("magic"), std::string::npos);
}

TEST(gguf_malformed, UnsupportedVersionsAreRefused) {
    for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
        image im(v, 0, 0);
        status st = parse(im.bytes);
        EXPECT_EQ(st.code(), error_code::unsupported) << v;
        EXPECT_NE(st.message().find("version"), std::string::npos);
    }
    for (uint32_t v : {2u, 3u}) EXPECT_TRUE(parse(image(v, 0, 0).bytes).is_ok()) << v;
}

TEST(gguf_malformed, AbsurdCountsAreRefusedBeforeAllocating) {
    EXPECT_FALSE(parse(image(3, 0, uint64_t(1) << 62).bytes).is_ok());
    EXPECT_FALSE(parse(image(3, uint64_t(1) << 62, 0).bytes).is_ok());
    EXPECT_FALSE(parse(image(3, ~uint64_t(0), ~uint64_t(0)).bytes).is_ok());
}

TEST(gguf_malformed, HugeStringLengthIsRefused) {
    image im(3, 0, 1);
    im.w.put_u64(~uint64_t(0));  // key length
    im.w.put_bytes("abc", 3);
    EXPECT_FALSE(parse(im.bytes).is_ok());
}

TEST(gguf_malformed, HugeArrayLengthIsRefused) {
    for (uint32_t elem : {0u, 6u, 8u, 9u}) {
        image im(3, 0, 1);
        im.str("arr");
        im.w.put_u32(9);
        im.w.put_u32(elem);
        im.w.put_u64(uint64_t(1) << 60);
        im.w.put_zeros(64);
        EXPECT_FALSE(parse(im.bytes).is_ok()) << elem;
    }
}

// A parsed element costs far more than its encoding (a one-byte array element becomes a
// whole value), so the parse is budgeted by the file's size, not only bounded by it.
TEST(gguf_malformed, MetadataThatWouldTakeMoreMemoryThanItsBudgetIsRefused) {
    auto u8_array_image = [](uint64_t n_elems) {
        image img(3, 0, 1);
        img.str("big.u8s");
        img.w.put_u32(9);  // array
        img.w.put_u32(0);  // of u8
        img.w.put_u64(n_elems);
        img.w.put_zeros(static_cast<size_t>(n_elems));
        return img.bytes;
    };
    // 4M one-byte elements: a 4 MiB file that would parse into ~400 MiB of values.
    auto huge = file::from_bytes(u8_array_image(uint64_t(4) << 20));
    ASSERT_FALSE(huge.is_ok());
    EXPECT_EQ(huge.error().code(), error_code::invalid_data);
    EXPECT_NE(huge.error().message().find("MiB of memory allowed"), std::string::npos) << huge.error().to_string();
    // The same shape within the budget parses; a tighter budget refuses it.
    const auto small = u8_array_image(1000);
    auto ok = file::from_bytes(small);
    ASSERT_TRUE(ok.is_ok()) << ok.error().to_string();
    EXPECT_EQ((*ok)->find("big.u8s")->as_array()->size(), 1000u);
    open_options tight;
    tight.min_metadata_bytes = 0;
    tight.metadata_bytes_per_file_byte = 4;
    EXPECT_FALSE(file::from_bytes(small, tight).is_ok());
    // Counts of metadata pairs and tensors are charged before their tables are reserved.
    tight.metadata_bytes_per_file_byte = 1;
    image many(3, 0, 2000);
    for (int i = 0; i < 2000; ++i) many.kv_u32("k" + std::to_string(i), 1);
    EXPECT_TRUE(file::from_bytes(many.bytes).is_ok());
    auto refused = file::from_bytes(many.bytes, tight);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.error().message().find("metadata count 2000"), std::string::npos) << refused.error().to_string();
}

TEST(gguf_malformed, UnknownValueTypesAreRefused) {
    image im(3, 0, 1);
    im.str("k");
    im.w.put_u32(13);
    im.w.put_u32(0);
    EXPECT_FALSE(parse(im.bytes).is_ok());
    image im2(3, 0, 1);
    im2.str("k");
    im2.w.put_u32(9);
    im2.w.put_u32(99);  // array of an unknown type
    im2.w.put_u64(1);
    im2.w.put_u32(0);
    EXPECT_FALSE(parse(im2.bytes).is_ok());
}

TEST(gguf_malformed, BoolOtherThanZeroOrOneIsRefused) {
    image im(3, 0, 1);
    im.str("b");
    im.w.put_u32(7);
    im.w.put_u8(2);
    EXPECT_FALSE(parse(im.bytes).is_ok());
}

TEST(gguf_malformed, DeeplyNestedArraysAreRefused) {
    image im(3, 0, 1);
    im.str("deep");
    im.w.put_u32(9);
    for (int i = 0; i < 64; ++i) { im.w.put_u32(9); im.w.put_u64(1); }
    im.w.put_u32(4);
    im.w.put_u64(1);
    im.w.put_u32(0);
    EXPECT_FALSE(parse(im.bytes).is_ok());
}

TEST(gguf_malformed, DuplicateKeysAndTensorsAreRefused) {
    image im(3, 0, 2);
    im.kv_u32("a", 1);
    im.kv_u32("a", 2);
    EXPECT_FALSE(parse(im.bytes).is_ok());

    image t(3, 2, 0);
    t.tensor("x", {4}, 0, 0);
    t.tensor("x", {4}, 0, 32);
    t.pad_to(32);
    t.w.put_zeros(64);
    EXPECT_FALSE(parse(t.bytes).is_ok());
}

// Names from the file are quoted escaped (base/escape.h): no raw control bytes or invalid
// UTF-8 reach a message, and a huge name is cut.
TEST(gguf_malformed, NamesInMessagesAreEscaped) {
    const std::string key("k\0\xFF\x1B[2J", 7);
    image im(3, 0, 2);
    im.kv_u32(key, 1);
    im.kv_u32(key, 2);
    const status st = parse(im.bytes);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("'k\\x00\\xFF\\x1B[2J'"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\0'), std::string::npos);
    EXPECT_EQ(st.message().find('\x1B'), std::string::npos);

    image t(3, 1, 0);
    t.tensor(std::string(100000, 'n') + "\n", {4}, 999, 0);  // unknown type
    const status st2 = parse(t.bytes);
    ASSERT_FALSE(st2.is_ok());
    EXPECT_NE(st2.message().find("... (100001 bytes)"), std::string::npos) << st2.message().substr(0, 300);
    EXPECT_LT(st2.message().size(), 400u);
}

TEST(gguf_malformed, BadAlignmentIsRefused) {
    for (uint32_t al : {0u, 3u, 48u, 1u << 30}) {
        image im(3, 0, 1);
        im.kv_u32("general.alignment", al);
        EXPECT_FALSE(parse(im.bytes).is_ok()) << al;
    }
}

struct tensor_case {
    const char *          what;
    std::vector<uint64_t> dims;
    uint32_t              type;
    uint64_t              offset;
};

TEST(gguf_malformed, BadTensorInfosAreRefused) {
    const std::vector<tensor_case> cases = {
        {"no dimensions", {}, 0, 0},
        {"five dimensions", {1, 1, 1, 1, 1}, 0, 0},
        {"zero dimension", {4, 0}, 0, 0},
        {"element count overflow", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0},
        {"dimension above int64", {~uint64_t(0)}, 0, 0},
        {"unknown type", {4}, 77, 0},
        {"row not a block multiple", {33}, 8, 0},
        {"misaligned offset", {4}, 0, 4},
        {"data out of bounds", {4}, 0, 64},
        {"offset overflow", {4}, 0, ~uint64_t(0) - 31},
        {"size beyond file", {uint64_t(1) << 40}, 0, 0},
    };
    for (const auto & c : cases) {
        image im(3, 1, 0);
        im.tensor("t", c.dims, c.type, c.offset);
        im.pad_to(32);
        im.w.put_zeros(32);  // 32 bytes of data section
        status st = parse(im.bytes);
        EXPECT_EQ(st.code(), error_code::invalid_data) << c.what;
        EXPECT_NE(st.message().find("'t'"), std::string::npos) << c.what << ": " << st.message();
    }
}

TEST(gguf_malformed, DataSectionPastEndOfFileIsRefused) {
    image im(3, 1, 0);
    im.tensor("t", {1}, 0, 0);  // infos end unaligned; no padding, no data
    EXPECT_FALSE(parse(im.bytes).is_ok());
}

// The block geometry of the types that arrived with the second wave of shared models:
// a tensor of two blocks opens with exactly that many bytes, and refuses one byte less
// of data section, or a row that is not a whole number of blocks.
TEST(gguf_malformed, BlockGeometryOfIq4AndMxfp4) {
    struct geometry_case {
        uint32_t    raw_type;
        const char *name;
        int64_t     block_elems;
        size_t      block_bytes;
    };
    const std::vector<geometry_case> cases = {
        {20, "IQ4_NL", 32, 18},
        {23, "IQ4_XS", 256, 136},
        {39, "MXFP4", 32, 17},
    };
    for (const auto & c : cases) {
        auto traits = get_tensor_type_traits(c.raw_type);
        ASSERT_TRUE(traits.has_value()) << c.name;
        EXPECT_EQ(traits->name, c.name);
        EXPECT_EQ(traits->block_elems, c.block_elems) << c.name;
        EXPECT_EQ(traits->block_bytes, c.block_bytes) << c.name;
        EXPECT_EQ(parse_tensor_type(c.name), static_cast<tensor_type>(c.raw_type)) << c.name;

        const size_t n_bytes = 2 * c.block_bytes;
        auto build = [&](uint64_t row_elems, size_t data_bytes) {
            image im(3, 1, 0);
            im.tensor("t", {row_elems}, c.raw_type, 0);
            im.pad_to(32);
            im.w.put_zeros(data_bytes);
            return im.bytes;
        };
        auto valid = build(2 * c.block_elems, n_bytes);
        auto f = file::from_bytes(valid);
        ASSERT_TRUE(f.is_ok()) << c.name << ": " << f.error().message();
        ASSERT_EQ((*f)->tensors().size(), 1u);
        EXPECT_EQ((*f)->tensors()[0].n_bytes, n_bytes) << c.name;
        EXPECT_EQ((*f)->tensors()[0].type, static_cast<tensor_type>(c.raw_type));

        status short_data = parse(build(2 * c.block_elems, n_bytes - 1));
        EXPECT_EQ(short_data.code(), error_code::invalid_data) << c.name;
        EXPECT_NE(short_data.message().find("'t'"), std::string::npos) << short_data.message();

        status partial_block = parse(build(2 * c.block_elems - 1, n_bytes));
        EXPECT_EQ(partial_block.code(), error_code::invalid_data) << c.name;
        EXPECT_NE(partial_block.message().find(c.name), std::string::npos) << partial_block.message();
    }
}

TEST(gguf_malformed, RandomByteFlipsNeverCrash) {
    const auto full = valid_image();
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 3000; ++iter) {
        auto bytes = full;
        for (int k = 0; k < 3; ++k) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            bytes[rng % bytes.size()] ^= static_cast<uint8_t>(rng >> 32) | 1;
        }
        auto f = file::from_bytes(bytes);
        if (f.is_ok()) {
            for (const auto & t : (*f)->tensors()) {
                ASSERT_LE(t.data + t.n_bytes, (*f)->tensors()[0].data - (*f)->tensors()[0].offset + (bytes.size() - (*f)->data_offset()));
            }
        }
    }
}

}  // namespace
}  // namespace skippy::gguf
