// The request limits parse_request enforces at the edge: the same bounds every stage
// applies (sampling_bounds, the wire's limits), canonical logit_bias keys, and token ids
// within the vocabulary. Whatever passes here, sampling_config::validate() accepts.
#include "http/api.h"

#include <gtest/gtest.h>

namespace skippy::http {
namespace {

request_limits limits(int32_t n_vocab = 2048) {
    request_limits l;
    l.ctx_size = 256;
    l.n_vocab = n_vocab;
    return l;
}

std::optional<api_error> parse(const std::string & fields, const request_limits & l = limits()) {
    completion_request out;
    const std::string body = R"({"prompt":"hi")" + (fields.empty() ? "" : "," + fields) + "}";
    return parse_request(body, endpoint::completions, l, out);
}

std::string bias_object(int32_t first, int32_t count) {
    std::string s = R"("logit_bias":{)";
    for (int32_t i = 0; i < count; ++i) s += (i ? "," : "") + ("\"" + std::to_string(first + i) + "\":1");
    return s + "}";
}

TEST(request_validation, NonCanonicalLogitBiasKeysAreRefusedByName) {
    for (const char * key : {" 5", "\\t5", "+5", "05", "5 ", "00", "-0", "5.0", "0x5", "", "1e3"}) {
        const auto e = parse(std::string(R"("logit_bias":{")") + key + R"(":1})");
        ASSERT_TRUE(e) << key;
        EXPECT_EQ(e->http_status, 400);
        EXPECT_EQ(e->param, "logit_bias");
        EXPECT_NE(e->message.find("'"), std::string::npos) << e->message;
    }
    EXPECT_FALSE(parse(R"("logit_bias":{"0":1,"5":-100,"2047":100})"));
}

TEST(request_validation, ADuplicateLogitBiasKeyIsRefused) {
    const auto e = parse(R"("logit_bias":{"5":60,"7":1,"5":60})");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "logit_bias");
    EXPECT_NE(e->message.find("'5'"), std::string::npos) << e->message;
    // The same key elsewhere in the body is no duplicate.
    EXPECT_FALSE(parse(R"("user":{"5":1},"logit_bias":{"5":1},"metadata":{"5":2})"));
}

TEST(request_validation, LogitBiasCountValueAndVocabularyBounds) {
    const size_t max = protocol::protocol_limits{}.max_logit_bias;  // what a stage accepts
    EXPECT_FALSE(parse(bias_object(0, static_cast<int32_t>(max))));
    const auto over = parse(bias_object(0, static_cast<int32_t>(max) + 1));
    ASSERT_TRUE(over);
    EXPECT_EQ(over->param, "logit_bias");
    EXPECT_TRUE(parse(bias_object(0, 1500)));
    EXPECT_TRUE(parse(R"("logit_bias":{"2048":1})"));   // = n_vocab
    EXPECT_TRUE(parse(R"("logit_bias":{"99999999999":1})"));
    EXPECT_TRUE(parse(R"("logit_bias":{"5":100.5})"));
    EXPECT_TRUE(parse(R"("logit_bias":{"5":"1"})"));
    EXPECT_FALSE(parse(R"("logit_bias":{"5":-100})"));
}

TEST(request_validation, SamplingRangesAreTheStagesRanges) {
    const std::pair<std::string, std::string> refused[] = {
        {R"("top_k":-5)", "top_k"},
        {R"("top_k":16777217)", "top_k"},
        {R"("temperature":1e30)", "temperature"},
        {R"("temperature":-0.5)", "temperature"},
        {R"("temperature":100.5)", "temperature"},
        {R"("top_p":0)", "top_p"},
        {R"("min_p":1.5)", "min_p"},
        {R"("presence_penalty":2.5)", "presence_penalty"},
        {R"("frequency_penalty":-3)", "frequency_penalty"},
        {R"("repetition_penalty":0)", "repetition_penalty"},
        {R"("repetition_penalty":0.005)", "repetition_penalty"},
        {R"("repeat_penalty":101)", "repeat_penalty"},
        {R"("seed":1.5)", "seed"},
        {R"("max_tokens":257)", "max_tokens"},
        {R"("prompt":[1,2048])", "prompt[1]"},
        {R"("prompt":[-1])", "prompt[0]"},
    };
    for (const auto & [field, param] : refused) {
        const auto e = parse(field);
        ASSERT_TRUE(e) << field;
        EXPECT_EQ(e->param, param) << field;
    }
    // The extremes of every range are accepted, and what is accepted a stage accepts too.
    completion_request out;
    const std::string body = R"({"prompt":[1,2047],"temperature":100,"top_k":16777216,"top_p":1,"min_p":1,)"
                             R"("presence_penalty":-2,"frequency_penalty":2,"repetition_penalty":100,"seed":-1,)"
                             R"("logit_bias":{"2047":-100}})";
    ASSERT_FALSE(parse_request(body, endpoint::completions, limits(), out));
    EXPECT_TRUE(out.sampling.validate(2048).is_ok());
}

TEST(request_validation, AStageRefusesWhatTheEdgeRefuses) {
    sampling_config c;
    EXPECT_TRUE(c.validate(2048).is_ok());
    auto refused = [](const sampling_config & config, const char * field) {
        const status st = config.validate(2048);
        EXPECT_EQ(st.code(), error_code::invalid_argument) << field;
        EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
    };
    sampling_config t = c;
    t.top_k = -5;
    refused(t, "top_k");
    t = c;
    t.temperature = 1e30f;
    refused(t, "temperature");
    t = c;
    t.presence_penalty = 3;
    refused(t, "presence_penalty");
    t = c;
    t.logit_bias = {{2048, 1.0f}};
    refused(t, "logit_bias");
}

}  // namespace
}  // namespace skippy::http
