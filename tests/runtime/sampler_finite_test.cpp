// sample_finite: a broken model's NaN or infinite logits fail the request instead of
// "sampling" a token, whatever the sampling mode.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace skippy {
namespace {

TEST(sampler, NonFiniteLogitsAreARuntimeErrorNamingTheToken) {
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
        for (float temperature : {0.0f, 0.8f}) {
            sampling_config c;
            c.temperature = temperature;
            sampler s(c);
            std::vector<float> logits = {0.5f, 1.0f, bad, 0.0f};
            const auto r = s.sample_finite(logits);
            ASSERT_FALSE(r.is_ok()) << bad;
            EXPECT_EQ(r.error().code(), error_code::runtime);
            EXPECT_NE(r.error().message().find("not finite"), std::string::npos);
            EXPECT_NE(r.error().message().find("token 2"), std::string::npos) << r.error().message();
        }
    }
}

TEST(sampler, FiniteLogitsSampleAsSampleDoes) {
    sampling_config c;
    c.seed = 7;
    sampler a(c), b(c);
    for (int i = 0; i < 20; ++i) {
        std::vector<float> la = {0.1f, 0.4f, 0.3f, 0.2f}, lb = la;
        const auto r = a.sample_finite(la);
        ASSERT_TRUE(r.is_ok());
        EXPECT_EQ(*r, b.sample(lb));
    }
}

}  // namespace
}  // namespace skippy
