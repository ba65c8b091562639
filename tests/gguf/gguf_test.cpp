#include "base/byte_io.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace skippy::gguf {
namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float> & v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
}

TEST(gguf, WriterOutputReadsBackWithEveryValueType) {
    writer w;
    w.set("general.architecture", value::make_string("llama"));
    w.set("k.u8", value::make_int(value_type::u8, 200));
    w.set("k.i8", value::make_int(value_type::i8, -100));
    w.set("k.u16", value::make_int(value_type::u16, 60000));
    w.set("k.i16", value::make_int(value_type::i16, -30000));
    w.set("k.u32", value::make_u32(4000000000u));
    w.set("k.i32", value::make_i32(-2000000000));
    w.set("k.u64", value::make_u64(18000000000000000000ull));
    w.set("k.i64", value::make_int(value_type::i64, -9000000000000000000ll));
    w.set("k.f32", value::make_f32(1.5f));
    w.set("k.f64", value::make_f64(-2.25));
    w.set("k.bool", value::make_bool(true));
    w.set("k.strs", value::make_string_array({"a", "", "ccc"}));
    w.set("k.nested", value::make_array(value_type::array, {value::make_i32_array({1, 2}), value::make_i32_array({3})}));
    w.add_tensor("t0", {4, 2}, tensor_type::f32, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
    w.add_tensor("t1", {3}, tensor_type::f32, f32_bytes({9, 10, 11}));

    auto bytes = w.to_bytes();
    auto f = file::from_bytes(bytes);
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    const file & g = **f;
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("k.u8"), 200);
    EXPECT_EQ(g.get_int("k.i8"), -100);
    EXPECT_EQ(g.get_int("k.u16"), 60000);
    EXPECT_EQ(g.get_int("k.i16"), -30000);
    EXPECT_EQ(g.get_int("k.u32"), 4000000000ll);
    EXPECT_EQ(g.get_int("k.i32"), -2000000000);
    EXPECT_EQ(g.get_int("k.u64"), std::nullopt) << "above INT64_MAX is only readable as u64";
    EXPECT_EQ(g.find("k.u64")->as_u64(), 18000000000000000000ull);
    EXPECT_EQ(g.get_int("k.i64"), -9000000000000000000ll);
    EXPECT_EQ(g.get_float("k.f32"), 1.5);
    EXPECT_EQ(g.get_float("k.f64"), -2.25);
    EXPECT_EQ(g.get_bool("k.bool"), true);
    EXPECT_EQ(g.get_string("k.u8"), std::nullopt) << "wrong type is absent, not coerced";
    const auto * strs = g.find("k.strs")->as_array();
    ASSERT_NE(strs, nullptr);
    ASSERT_EQ(strs->size(), 3u);
    EXPECT_EQ(*(*strs)[2].as_string(), "ccc");
    const auto * nested = g.find("k.nested")->as_array();
    ASSERT_NE(nested, nullptr);
    EXPECT_EQ((*nested)[1].as_array()->at(0).as_int(), 3);

    ASSERT_EQ(g.tensors().size(), 2u);
    const tensor_info * t0 = g.find_tensor("t0");
    ASSERT_NE(t0, nullptr);
    EXPECT_EQ(t0->dims, (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(t0->n_rows(), 2);
    EXPECT_EQ(t0->n_bytes, 32u);
    float got[8];
    std::memcpy(got, t0->data, 32);
    EXPECT_EQ(got[7], 8.0f);
    const tensor_info * t1 = g.find_tensor("t1");
    EXPECT_EQ(t1->offset % g.alignment(), 0u);
    EXPECT_EQ((t1->data - (*f)->tensors()[0].data) % 32, 0);
    EXPECT_EQ(g.find_tensor("missing"), nullptr);
}

TEST(gguf, CustomAlignmentIsRecordedAndHonoured) {
    writer w(64);
    w.add_tensor("a", {1}, tensor_type::f32, f32_bytes({1}));
    w.add_tensor("b", {1}, tensor_type::f32, f32_bytes({2}));
    auto f = file::from_bytes(w.to_bytes());
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    EXPECT_EQ((*f)->alignment(), 64u);
    EXPECT_EQ((*f)->data_offset() % 64, 0u);
    EXPECT_EQ((*f)->find_tensor("b")->offset, 64u);
}

TEST(gguf, SetReplacesAnExistingKey) {
    writer w;
    w.set("x", value::make_u32(1));
    w.set("x", value::make_u32(2));
    auto f = file::from_bytes(w.to_bytes());
    ASSERT_TRUE(f.is_ok());
    EXPECT_EQ((*f)->metadata().size(), 1u);
    EXPECT_EQ((*f)->get_int("x"), 2);
}

TEST(gguf, BlockIndexReadsOnlyWellFormedBlockNames) {
    EXPECT_EQ(block_index("blk.0.attn_q.weight"), 0);
    EXPECT_EQ(block_index("blk.47.ffn_down_exps.weight"), 47);
    EXPECT_EQ(block_index("blk.3.x"), 3);
    for (const char * name : {"output.weight", "token_embd.weight", "blk.", "blk.3", "blk.3.", "blk.x.attn_q.weight",
                              "blk.3a.attn_q.weight", "blk.-1.attn_q.weight", "blk..attn_q.weight", "xblk.3.attn_q.weight",
                              "blk.99999999999.attn_q.weight"}) {
        EXPECT_EQ(block_index(name), -1) << name;
    }
}

TEST(gguf, OpenReportsMissingFileAsNotFound) {
    auto f = file::open("/nonexistent/skippy/model.gguf");
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.error().code(), error_code::not_found);
}

bool transparent_huge_pages_on() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(in, modes);
    return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
}

// The line of /proc/self/maps whose range holds p.
std::string mapping_of(const void * p) {
    std::ifstream maps("/proc/self/maps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    for (std::string line; std::getline(maps, line);) {
        uintptr_t lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi) return line;
    }
    return {};
}

// back_with_huge_pages moves file ranges onto anonymous memory (huge pages where the
// kernel has them) at the same addresses: every tensor keeps its pointer and its bytes,
// ranges are rounded out to 2 MiB and clipped to the file, and a range moved once is
// not moved again.
TEST(gguf, HugePagesKeepEveryTensorsAddressAndBytes) {
    writer w;
    for (int k = 0; k < 3; ++k) {
        std::vector<float> v(393216);  // 1.5 MiB each: the file spans three 2 MiB chunks
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(k * 1000003 + static_cast<int64_t>(i % 9973));
        w.add_tensor("t" + std::to_string(k), {static_cast<int64_t>(v.size())}, tensor_type::f32, f32_bytes(v));
    }
    const std::string path = (std::filesystem::temp_directory_path() / ("skippy-huge-" + std::to_string(::getpid()) + ".gguf")).string();
    {
        const auto bytes = w.to_bytes();
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    auto opened = file::open(path);
    std::filesystem::remove(path);  // the mapping outlives the name
    ASSERT_TRUE(opened.is_ok()) << opened.error().to_string();
    const file & f = **opened;
    std::vector<const uint8_t *> pointers;
    std::vector<std::vector<uint8_t>> contents;
    for (const tensor_info & t : f.tensors()) {
        pointers.push_back(t.data);
        contents.emplace_back(t.data, t.data + t.n_bytes);
    }
    const auto unchanged = [&] {
        for (size_t i = 0; i < f.tensors().size(); ++i) {
            const tensor_info & t = f.tensors()[i];
            ASSERT_EQ(t.data, pointers[i]) << t.name;
            ASSERT_EQ(std::memcmp(t.data, contents[i].data(), t.n_bytes), 0) << t.name;
        }
    };
    const bool thp = transparent_huge_pages_on();
    const tensor_info & t1 = *f.find_tensor("t1");
    EXPECT_NE(mapping_of(t1.data).find("skippy-huge-"), std::string::npos) << "before: the file mapping";

    const file::byte_range middle[] = {{f.data_offset() + t1.offset, t1.n_bytes}};
    auto moved = f.back_with_huge_pages(middle);
    ASSERT_TRUE(moved.is_ok()) << moved.error().to_string();
    unchanged();
    if (thp) {
        EXPECT_GT(*moved, 0u);
        EXPECT_EQ(*moved % (2u << 20), 0u);
        EXPECT_EQ(mapping_of(t1.data).find("skippy-huge-"), std::string::npos) << "after: anonymous, " << mapping_of(t1.data);
    } else {
        EXPECT_EQ(*moved, 0u) << "transparent huge pages are off: nothing moves";
    }
    auto again = f.back_with_huge_pages(middle);
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(*again, 0u) << "already moved";

    // Everything, plus an empty range and ranges past the end of the file.
    const file::byte_range all[] = {{0, ~uint64_t{0}}, {5, 0}, {f.size_bytes() + 100, 10}};
    auto rest = f.back_with_huge_pages(all);
    ASSERT_TRUE(rest.is_ok()) << rest.error().to_string();
    unchanged();
    if (thp) {
        EXPECT_EQ(*moved + *rest, (f.size_bytes() + (2u << 20) - 1) / (2u << 20) * (2u << 20));
    }

    // An image from bytes has no file to map: nothing to move.
    auto in_memory = file::from_bytes(w.to_bytes());
    ASSERT_TRUE(in_memory.is_ok());
    auto none = (*in_memory)->back_with_huge_pages(all);
    ASSERT_TRUE(none.is_ok());
    EXPECT_EQ(*none, 0u);
}

// GGUF version 2 has version 3's layout (u64 counts and lengths; version 1 had u32
// ones and is refused). A v2 image encoded by hand here, independent of our writer,
// with metadata of every type, arrays of every element type, a non-default alignment
// and tensors of several types and ranks, reads back exactly.
struct v2_image {
    std::vector<uint8_t> bytes;
    byte_writer          w{bytes};
    void str(const std::string & s) { w.put_u64(s.size()); w.put_bytes(s.data(), s.size()); }
    void key(const std::string & k, value_type t) { str(k); w.put_u32(static_cast<uint32_t>(t)); }
    void array_header(const std::string & k, value_type elem, uint64_t n) {
        key(k, value_type::array);
        w.put_u32(static_cast<uint32_t>(elem));
        w.put_u64(n);
    }
};

TEST(gguf, Version2FileWithEveryTypeReadsBack) {
    struct tensor_spec {
        std::string          name;
        std::vector<int64_t> dims;
        tensor_type          type;
        size_t               n_bytes;
        uint64_t             offset;
    };
    const std::vector<tensor_spec> specs = {
        {"t.f32", {3, 2}, tensor_type::f32, 24, 0},
        {"t.f16", {4}, tensor_type::f16, 8, 64},
        {"t.q8_0", {32, 2}, tensor_type::q8_0, 68, 128},
        {"t.bf16.3d", {2, 1, 3}, tensor_type::bf16, 12, 256},
    };

    v2_image im;
    im.w.put_bytes("GGUF", 4);
    im.w.put_u32(2);
    im.w.put_u64(specs.size());
    im.w.put_u64(21);  // metadata count, checked by the count of entries below
    int n_kv = 0;
    im.key("general.alignment", value_type::u32), im.w.put_u32(64), ++n_kv;
    im.key("v.u8", value_type::u8), im.w.put_u8(250), ++n_kv;
    im.key("v.i8", value_type::i8), im.w.put_u8(static_cast<uint8_t>(-7)), ++n_kv;
    im.key("v.u16", value_type::u16), im.w.put_u16(65000), ++n_kv;
    im.key("v.i16", value_type::i16), im.w.put_u16(static_cast<uint16_t>(-32000)), ++n_kv;
    im.key("v.u32", value_type::u32), im.w.put_u32(4000000001u), ++n_kv;
    im.key("v.i32", value_type::i32), im.w.put_i32(-2000000001), ++n_kv;
    im.key("v.f32", value_type::f32), im.w.put_f32(-0.375f), ++n_kv;
    im.key("v.bool", value_type::boolean), im.w.put_u8(1), ++n_kv;
    im.key("v.string", value_type::string), im.str("h\xC3\xA9llo"), ++n_kv;
    im.key("v.u64", value_type::u64), im.w.put_u64(0xFEDCBA9876543210ull), ++n_kv;
    im.key("v.i64", value_type::i64), im.w.put_i64(-1234567890123ll), ++n_kv;
    im.key("v.f64", value_type::f64), im.w.put_f64(6.02214076e23), ++n_kv;
    im.array_header("a.u8", value_type::u8, 3), im.w.put_u8(1), im.w.put_u8(2), im.w.put_u8(255), ++n_kv;
    im.array_header("a.i16", value_type::i16, 2), im.w.put_u16(static_cast<uint16_t>(-2)), im.w.put_u16(3), ++n_kv;
    im.array_header("a.f32", value_type::f32, 2), im.w.put_f32(0.5f), im.w.put_f32(-8.0f), ++n_kv;
    im.array_header("a.bool", value_type::boolean, 2), im.w.put_u8(0), im.w.put_u8(1), ++n_kv;
    im.array_header("a.string", value_type::string, 3), im.str("x"), im.str(""), im.str("zz"), ++n_kv;
    im.array_header("a.i64", value_type::i64, 1), im.w.put_i64(INT64_MIN), ++n_kv;
    im.array_header("a.empty", value_type::f64, 0), ++n_kv;
    im.array_header("a.nested", value_type::array, 2), ++n_kv;
    im.w.put_u32(static_cast<uint32_t>(value_type::u32)), im.w.put_u64(2), im.w.put_u32(7), im.w.put_u32(8);
    im.w.put_u32(static_cast<uint32_t>(value_type::string)), im.w.put_u64(1), im.str("in");
    ASSERT_EQ(n_kv, 21);
    for (const auto & t : specs) {
        im.str(t.name);
        im.w.put_u32(static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) im.w.put_u64(static_cast<uint64_t>(d));
        im.w.put_u32(static_cast<uint32_t>(t.type));
        im.w.put_u64(t.offset);
    }
    im.w.put_zeros((64 - im.bytes.size() % 64) % 64);
    const size_t data_start = im.bytes.size();
    for (size_t i = 0; i < specs.size(); ++i) {
        im.w.put_zeros(data_start + specs[i].offset - im.bytes.size());
        for (size_t b = 0; b < specs[i].n_bytes; ++b) im.w.put_u8(static_cast<uint8_t>(17 * i + 3 * b + 1));
    }

    auto f = file::from_bytes(im.bytes);
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    const file & g = **f;
    EXPECT_EQ(g.version(), 2u);
    EXPECT_EQ(g.alignment(), 64u);
    EXPECT_EQ(g.data_offset(), data_start);
    ASSERT_EQ(g.metadata().size(), 21u);
    EXPECT_EQ(g.metadata()[1].first, "v.u8") << "file order is kept";
    EXPECT_EQ(g.find("v.u8")->type(), value_type::u8);
    EXPECT_EQ(g.get_int("v.u8"), 250);
    EXPECT_EQ(g.get_int("v.i8"), -7);
    EXPECT_EQ(g.get_int("v.u16"), 65000);
    EXPECT_EQ(g.get_int("v.i16"), -32000);
    EXPECT_EQ(g.get_int("v.u32"), 4000000001ll);
    EXPECT_EQ(g.get_int("v.i32"), -2000000001);
    EXPECT_EQ(g.get_float("v.f32"), -0.375);
    EXPECT_EQ(g.get_bool("v.bool"), true);
    EXPECT_EQ(g.get_string("v.string"), "h\xC3\xA9llo");
    EXPECT_EQ(g.find("v.u64")->as_u64(), 0xFEDCBA9876543210ull);
    EXPECT_EQ(g.get_int("v.i64"), -1234567890123ll);
    EXPECT_EQ(g.get_float("v.f64"), 6.02214076e23);

    // The array at key k if it holds n elements of type elem, else nullptr.
    auto array = [&](const char * k, value_type elem, size_t n) -> const std::vector<value> * {
        const value * v = g.find(k);
        if (!v || !v->as_array() || v->array_type() != elem || v->as_array()->size() != n) return nullptr;
        return v->as_array();
    };
    const auto * a_u8 = array("a.u8", value_type::u8, 3);
    ASSERT_NE(a_u8, nullptr);
    EXPECT_EQ((*a_u8)[2].as_int(), 255);
    const auto * a_i16 = array("a.i16", value_type::i16, 2);
    ASSERT_NE(a_i16, nullptr);
    EXPECT_EQ((*a_i16)[0].as_int(), -2);
    const auto * a_f32 = array("a.f32", value_type::f32, 2);
    ASSERT_NE(a_f32, nullptr);
    EXPECT_EQ((*a_f32)[1].as_float(), -8.0);
    const auto * a_bool = array("a.bool", value_type::boolean, 2);
    ASSERT_NE(a_bool, nullptr);
    EXPECT_EQ((*a_bool)[0].as_bool(), false);
    EXPECT_EQ((*a_bool)[1].as_bool(), true);
    const auto * a_str = array("a.string", value_type::string, 3);
    ASSERT_NE(a_str, nullptr);
    EXPECT_EQ(*(*a_str)[1].as_string(), "");
    EXPECT_EQ(*(*a_str)[2].as_string(), "zz");
    const auto * a_i64 = array("a.i64", value_type::i64, 1);
    ASSERT_NE(a_i64, nullptr);
    EXPECT_EQ((*a_i64)[0].as_int(), INT64_MIN);
    EXPECT_NE(array("a.empty", value_type::f64, 0), nullptr);
    const auto * nested = array("a.nested", value_type::array, 2);
    ASSERT_NE(nested, nullptr);
    ASSERT_NE((*nested)[0].as_array(), nullptr);
    EXPECT_EQ((*nested)[0].as_array()->at(1).as_int(), 8);
    ASSERT_NE((*nested)[1].as_array(), nullptr);
    EXPECT_EQ(*(*nested)[1].as_array()->at(0).as_string(), "in");

    ASSERT_EQ(g.tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        const tensor_info * t = g.find_tensor(specs[i].name);
        ASSERT_NE(t, nullptr) << specs[i].name;
        EXPECT_EQ(t->dims, specs[i].dims) << t->name;
        EXPECT_EQ(t->type, specs[i].type) << t->name;
        EXPECT_EQ(t->offset, specs[i].offset) << t->name;
        EXPECT_EQ(t->n_bytes, specs[i].n_bytes) << t->name;
        ASSERT_EQ(t->data, g.tensors()[0].data + specs[i].offset) << t->name;
        for (size_t b = 0; b < specs[i].n_bytes; ++b) {
            ASSERT_EQ(t->data[b], static_cast<uint8_t>(17 * i + 3 * b + 1)) << t->name << " byte " << b;
        }
    }
    EXPECT_EQ(g.find_tensor("t.bf16.3d")->n_rows(), 3);

    // The image ends with the last tensor's last byte: any shorter prefix is refused.
    for (size_t len = 0; len < im.bytes.size(); ++len) {
        EXPECT_FALSE(file::from_bytes(std::span<const uint8_t>(im.bytes.data(), len)).is_ok()) << "cut at " << len;
    }
}

// Our writer's version-3 output, relabelled as version 2, reads back the same: the two
// versions share one layout.
TEST(gguf, WriterImageRelabelledVersion2ReadsTheSame) {
    writer w(64);
    w.set("k.i32", value::make_i32(-5));
    w.set("k.strs", value::make_string_array({"a", "bc"}));
    w.add_tensor("t0", {4, 2}, tensor_type::f32, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
    w.add_tensor("t1", {3}, tensor_type::f32, f32_bytes({9, 10, 11}));
    auto v3 = w.to_bytes();
    auto v2 = v3;
    ASSERT_EQ(v2[4], 3);
    v2[4] = 2;
    auto f3 = file::from_bytes(v3);
    auto f2 = file::from_bytes(v2);
    ASSERT_TRUE(f3.is_ok() && f2.is_ok());
    EXPECT_EQ((*f2)->version(), 2u);
    EXPECT_EQ((*f2)->alignment(), 64u);
    EXPECT_EQ((*f2)->data_offset(), (*f3)->data_offset());
    ASSERT_EQ((*f2)->metadata().size(), (*f3)->metadata().size());
    EXPECT_EQ((*f2)->get_int("k.i32"), -5);
    EXPECT_EQ(*(*f2)->find("k.strs")->as_array()->at(1).as_string(), "bc");
    ASSERT_EQ((*f2)->tensors().size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const tensor_info & a = (*f2)->tensors()[i];
        const tensor_info & b = (*f3)->tensors()[i];
        EXPECT_EQ(a.name, b.name);
        EXPECT_EQ(a.dims, b.dims);
        EXPECT_EQ(a.offset, b.offset);
        ASSERT_EQ(a.n_bytes, b.n_bytes);
        EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0);
    }
}

}  // namespace
}  // namespace skippy::gguf
