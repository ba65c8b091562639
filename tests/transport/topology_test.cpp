#include "transport/topology.h"

#include <gtest/gtest.h>

namespace skippy::transport {
namespace {

TEST(endpoint, ParsesHostPortForms) {
    auto a = endpoint::parse("127.0.0.1:7100");
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->host, "127.0.0.1");
    EXPECT_EQ(a->port, 7100);
    auto b = endpoint::parse("[::1]:80");
    ASSERT_TRUE(b.is_ok());
    EXPECT_EQ(b->host, "::1");
    EXPECT_EQ(b->to_string(), "[::1]:80");
    for (const char * bad : {"", "7100", ":7100", "host:", "host:70000", "host:12a", "[::1]80", "h:123456"}) {
        EXPECT_FALSE(endpoint::parse(bad).is_ok()) << bad;
    }
}

TEST(topology, ParsesTheDocumentedShapeAndResolvesRelativeModels) {
    auto t = topology::parse(R"({"model": "m.gguf", "stages": [{"layers": [0, 2], "endpoint": "127.0.0.1:7100"},
                                                               {"layers": [2, 5], "endpoint": "127.0.0.1:7101"}]})",
                             "/data/models");
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    EXPECT_EQ(t->model_path, "/data/models/m.gguf");
    ASSERT_EQ(t->n_stages(), 2);
    EXPECT_EQ(t->stages[1].layers.start, 2);
    EXPECT_EQ(t->stages[1].layers.end, 5);
    EXPECT_TRUE(t->validate(5).is_ok());
    EXPECT_FALSE(t->validate(6).is_ok()) << "must tile every layer";
    auto abs = topology::parse(R"({"model": "/abs/m.gguf", "stages": [{"layers": [0, 1], "endpoint": "h:1"}]})", "/x");
    EXPECT_EQ(abs->model_path, "/abs/m.gguf");
}

TEST(topology, RefusesMalformedFiles) {
    for (const char * bad : {
             "not json", "[]", R"({"stages": []})", R"({"model": 1, "stages": []})",
             R"({"model": "m", "stages": []})",
             R"({"model": "m", "stages": [{"layers": [0], "endpoint": "h:1"}]})",
             R"({"model": "m", "stages": [{"layers": [1, 2], "endpoint": "h:1"}]})",
             R"({"model": "m", "stages": [{"layers": [0, 2], "endpoint": "h:1"}, {"layers": [3, 4], "endpoint": "h:2"}]})",
             R"({"model": "m", "stages": [{"layers": [0, 0], "endpoint": "h:1"}]})",
             R"({"model": "m", "stages": [{"layers": [0, 2], "endpoint": "nohost"}]})",
             R"({"model": "m", "stages": [{"layers": ["a", 2], "endpoint": "h:1"}]})"}) {
        auto t = topology::parse(bad, "");
        EXPECT_FALSE(t.is_ok()) << bad;
    }
    auto dup = topology::parse(R"({"model": "m", "stages": [{"layers": [0, 1], "endpoint": "h:1"}, {"layers": [1, 2], "endpoint": "h:1"}]})", "");
    ASSERT_TRUE(dup.is_ok());
    EXPECT_FALSE(dup->validate(2).is_ok()) << "an endpoint used twice";
}

TEST(topology, EvenSplitTilesTheLayers) {
    auto t = even_split("m.gguf", 5, 3, "127.0.0.1", 7100);
    ASSERT_TRUE(t.is_ok());
    ASSERT_EQ(t->n_stages(), 3);
    EXPECT_EQ(t->stages[0].layers.end - t->stages[0].layers.start, 2);
    EXPECT_EQ(t->stages[1].layers.end - t->stages[1].layers.start, 2);
    EXPECT_EQ(t->stages[2].layers.end - t->stages[2].layers.start, 1);
    EXPECT_EQ(t->stages[2].address.port, 7102);
    EXPECT_TRUE(t->validate(5).is_ok());
    auto round_trip = topology::parse(t->to_json(), "");
    ASSERT_TRUE(round_trip.is_ok());
    EXPECT_EQ(round_trip->stages[1].address, t->stages[1].address);
    EXPECT_FALSE(even_split("m", 2, 3, "h", 1).is_ok()) << "more stages than layers";
    EXPECT_FALSE(even_split("m", 4, 2, "h", 65535).is_ok()) << "ports past 65535";
}

}  // namespace
}  // namespace skippy::transport
