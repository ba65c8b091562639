#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

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

TEST(gguf, OpenReportsMissingFileAsNotFound) {
    auto f = file::open("/nonexistent/skippy/model.gguf");
    ASSERT_FALSE(f.is_ok());
    EXPECT_EQ(f.error().code(), error_code::not_found);
}

}  // namespace
}  // namespace skippy::gguf
