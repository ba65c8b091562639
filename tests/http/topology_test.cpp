// One answer whatever the split: `skippy serve --stages 1, 2 and 3` on the same model
// give the same status (and the same text, or the same error param and code) to a
// corpus of edge-case requests, and a model whose weights make the logits non-finite
// fails the request alike on every topology (500, or an error event that ends a
// stream without [DONE]); `skippy generate` exits non-zero on it.
#include "child_process.h"
#include "common/test_data.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace skippy::http {
namespace {

using json = nlohmann::json;
using testing::child_process;
using testing::free_port;
using testing::run_to_completion;
using testing::start_serve;

const std::string k_skippy_binary = SKIPPY_BINARY_PATH;
const std::string k_dir = SKIPPY_HTTP_TEST_DIR "/topology";

std::string model_path(const std::string & name) { return k_dir + "/" + name + ".gguf"; }

// Overwrites the data of the F32 tensors `pick` selects with NaN.
void poison(const std::string & path, const std::function<bool(const std::string &)> & pick) {
    std::vector<std::pair<size_t, size_t>> spans;  // file offset, bytes
    {
        auto f = gguf::file::open(path);
        ASSERT_TRUE(f.is_ok()) << f.error().to_string();
        for (const auto & t : (*f)->tensors()) {
            if (t.type == tensor_type::f32 && pick(t.name)) spans.emplace_back((*f)->data_offset() + t.offset, t.n_bytes);
        }
    }
    ASSERT_FALSE(spans.empty());
    std::FILE * out = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(out, nullptr);
    for (const auto & [at, n] : spans) {
        const std::vector<float> nan(n / 4, std::nanf(""));
        std::fseek(out, static_cast<long>(at), SEEK_SET);
        ASSERT_EQ(std::fwrite(nan.data(), 4, nan.size(), out), nan.size());
    }
    std::fclose(out);
}

class TopologyTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::filesystem::create_directories(k_dir);
        // Three layers (one per stage at --stages 3) and a vocabulary larger than the
        // wire's logit_bias limit (1024), so that the count limit itself is reachable.
        std::string err;
        const int rc = run_to_completion({k_skippy_binary, "make-model", "--arch", "llama", "--n-embd", "64", "--n-layer", "3",
                                          "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "2048",
                                          "--type", "F32", "--seed", "11", "-o", model_path("m")},
                                         &err);
        ASSERT_EQ(rc, 0) << err;
        std::filesystem::copy_file(model_path("m"), model_path("nan-head"), std::filesystem::copy_options::overwrite_existing);
        std::filesystem::copy_file(model_path("m"), model_path("nan-all"), std::filesystem::copy_options::overwrite_existing);
        poison(model_path("nan-head"), [](const std::string & name) { return name == "output.weight"; });
        poison(model_path("nan-all"), [](const std::string &) { return true; });
    }
};

struct answer {
    int         status = 0;
    std::string param, code, message;
    std::string text;
    int64_t     completion_tokens = -1;
    std::string logprobs;  // choices[0].logprobs as JSON text ("null" unless asked for)
    int64_t     cached_tokens = 0;  // not in summary(): the cache's state differs between runs

    std::string summary() const {
        return std::to_string(status) + " param=" + param + " code=" + code + " tokens=" + std::to_string(completion_tokens) +
               " text=" + json(text).dump() + " logprobs=" + logprobs;
    }
};

answer ask(int port, const std::string & path, const std::string & body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    answer a;
    if (!r) return a;
    a.status = r->status;
    const json j = json::parse(r->body, nullptr, false);
    if (!j.is_object()) return a;
    if (j.contains("error")) {
        const json & e = j["error"];
        a.param = e["param"].is_string() ? e["param"].get<std::string>() : "";
        a.code = e["code"].is_string() ? e["code"].get<std::string>() : "";
        a.message = e["message"].is_string() ? e["message"].get<std::string>() : "";
    } else if (j.contains("choices")) {
        const json & choice = j["choices"][0];
        a.text = choice.contains("text") ? choice["text"].get<std::string>() : choice["message"]["content"].dump();
        // Doubles print with the digits that round-trip, so equal text is equal bits.
        a.logprobs = choice["logprobs"].dump();
        a.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
        a.completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
    }
    return a;
}

std::string bias(int32_t first, int32_t count, double value = 1) {
    json b = json::object();
    for (int32_t i = 0; i < count; ++i) b[std::to_string(first + i)] = value;
    return b.dump();
}

struct corpus_case {
    std::string name;
    std::string fields;  // JSON members added to a greedy 4-token completion of "Hello"
    int         expected_status;
};

std::vector<corpus_case> corpus() {
    return {
        {"plain", "", 200},
        {"bias one key", R"("logit_bias":{"5":10})", 200},
        {"bias at the count limit", "\"logit_bias\":" + bias(0, 1024), 200},
        {"bias one past the count limit", "\"logit_bias\":" + bias(0, 1025), 400},
        {"bias 1500 keys", "\"logit_bias\":" + bias(0, 1500), 400},
        {"bias key with a space", R"("logit_bias":{" 5":1})", 400},
        {"bias key with a tab", R"("logit_bias":{"\t5":1})", 400},
        {"bias key with a sign", R"("logit_bias":{"+5":1})", 400},
        {"bias key with a leading zero", R"("logit_bias":{"05":1})", 400},
        {"bias key twice", R"("logit_bias":{"5":60,"5":60})", 400},
        {"bias of 101", R"("logit_bias":{"5":101})", 400},
        {"bias of -100 (bans the token)", R"("logit_bias":{"5":-100})", 200},
        {"bias key at n_vocab", R"("logit_bias":{"2048":1})", 400},
        {"bias key at n_vocab - 1", R"("logit_bias":{"2047":50})", 200},
        {"bias key -1", R"("logit_bias":{"-1":1})", 400},
        {"top_k -5", R"("top_k":-5)", 400},
        {"top_k 0", R"("top_k":0,"temperature":0.7,"seed":3)", 200},
        {"top_k past its range", R"("top_k":16777217)", 400},
        {"temperature 1e30", R"("temperature":1e30)", 400},
        {"temperature 100", R"("temperature":100,"seed":5)", 200},
        {"temperature -0.5", R"("temperature":-0.5)", 400},
        {"top_p 0", R"("top_p":0)", 400},
        {"min_p 1.5", R"("min_p":1.5)", 400},
        {"presence_penalty 2.5", R"("presence_penalty":2.5)", 400},
        {"repetition_penalty 1.5", R"("repetition_penalty":1.5)", 200},
        {"repetition_penalty 0", R"("repetition_penalty":0)", 400},
        {"seed -1", R"("temperature":0.8,"seed":-1)", 200},
        {"seed 1.5", R"("seed":1.5)", 400},
        {"token prompt in range", R"("prompt":[1,2047,300])", 200},
        {"token prompt at n_vocab", R"("prompt":[1,2048])", 400},
        {"token prompt negative", R"("prompt":[-1,5])", 400},
        {"max_tokens past the context", R"("max_tokens":257)", 400},
        {"17 stop strings", R"("stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])", 400},
        {"cache key of 257 bytes", "\"prompt_cache_key\":\"" + std::string(257, 'k') + "\"", 400},
        // The final stage's constraint: grammars that cannot end within 4 tokens (so
        // that all 4 are compared), and one that does not compile.
        {"grammar of letters", R"("grammar":"root ::= [a-z]{12,20}","temperature":0.9,"seed":4)", 200},
        {"grammar with a brace", R"("grammar":"root ::= \"{\" [a-z]{10,}","temperature":0.9,"seed":6)", 200},
        {"grammar that does not compile", R"("grammar":"root ::= [a-z")", 400},
        // Log-probabilities: the same bits on every split (the sampled token's and the
        // top N, after bias and the grammar's mask); the bound is refused alike.
        {"logprobs 0", R"("logprobs":0)", 200},
        {"logprobs 5", R"("logprobs":5)", 200},
        {"logprobs 20 sampled", R"("logprobs":20,"temperature":0.9,"seed":8)", 200},
        {"logprobs 20 under a grammar with a bias", R"("logprobs":20,"grammar":"root ::= [a-z]{12,20}","logit_bias":{"5":3})", 200},
        {"logprobs 21", R"("logprobs":21)", 400},
        {"logprobs -1", R"("logprobs":-1)", 400},
        {"logprobs true", R"("logprobs":true)", 400},
    };
}

std::string corpus_body(const corpus_case & c) {
    std::string body = R"({"prompt":"Hello","max_tokens":4,"temperature":0)";
    // Later members win in a JSON object, so a case's own prompt or temperature applies.
    if (!c.fields.empty()) body += "," + c.fields;
    return body + "}";
}

TEST_F(TopologyTest, TheCorpusGetsTheSameAnswerOnOneTwoAndThreeStages) {
    const auto cases = corpus();
    std::map<int, std::vector<answer>> by_stages;
    for (int n : {1, 2, 3}) {
        auto s = start_serve(k_skippy_binary, {"-m", model_path("m"), "--stages", std::to_string(n), "-t", "1", "--lanes", "1",
                                        "-c", "256"});
        ASSERT_GT(s.port, 0) << (s.proc ? s.proc->stderr_text() : "did not start");
        for (const auto & c : cases) by_stages[n].push_back(ask(s.port, "/v1/completions", corpus_body(c)));
        EXPECT_EQ(s.proc->stop(), 0);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
        const answer & one = by_stages[1][i];
        EXPECT_EQ(one.status, cases[i].expected_status) << cases[i].name << ": " << one.summary() << " " << one.message;
        if (one.status == 200) {
            EXPECT_EQ(one.completion_tokens, 4) << cases[i].name;
        } else {
            EXPECT_FALSE(one.param.empty()) << cases[i].name;
        }
        for (int n : {2, 3}) {
            EXPECT_EQ(by_stages[n][i].summary(), one.summary()) << cases[i].name << " on " << n << " stages";
        }
    }
}

// With the prefix cache on and off, and when the cache serves the prompt, the
// logprobs of a request are the same bits (on 2 stages).
TEST_F(TopologyTest, LogprobsAreTheSameBitsWithTheCacheOnAndOff) {
    const std::string body =
        R"({"prompt":"Hello there, tell me a story about a cat and a dog and a bird","max_tokens":5,"temperature":0,)"
        R"("logprobs":4})";
    std::vector<std::string> seen;
    for (const char * cache : {"lookup-record", "off"}) {
        auto s = start_serve(k_skippy_binary, {"-m", model_path("m"), "--stages", "2", "-t", "1", "--lanes", "1", "-c", "256",
                                        "--kv-cache", cache, "--kv-cache-min-tokens", "4"});
        ASSERT_GT(s.port, 0) << (s.proc ? s.proc->stderr_text() : "did not start");
        for (int i = 0; i < 2; ++i) {  // the second time from the cache (when on)
            const answer a = ask(s.port, "/v1/completions", body);
            ASSERT_EQ(a.status, 200) << a.message;
            ASSERT_NE(a.logprobs, "null");
            if (i == 1 && std::string(cache) != "off") {
                EXPECT_GT(a.cached_tokens, 0) << "the cache did not serve the prompt";
            }
            seen.push_back(a.logprobs);
        }
        EXPECT_EQ(s.proc->stop(), 0);
    }
    for (const std::string & lp : seen) EXPECT_EQ(lp, seen[0]);
    const json lp = json::parse(seen[0]);
    ASSERT_EQ(lp["tokens"].size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
        const json & top = lp["top_logprobs"][i];
        ASSERT_GE(top.size(), 1u);
        // Greedy: the sampled token is the likeliest (its piece is a key of the top map).
        ASSERT_TRUE(top.contains(lp["tokens"][i].get<std::string>()));
        EXPECT_EQ(top[lp["tokens"][i].get<std::string>()], lp["token_logprobs"][i]);
    }
}

// What a streamed request's events were: the payloads of its "data: " lines.
std::vector<std::string> stream_events(int port, const std::string & path, const std::string & body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    std::vector<std::string> out;
    if (!r) return out;
    size_t pos = 0;
    while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
        const size_t end = r->body.find("\n\n", pos);
        if (end == std::string::npos) break;
        out.push_back(r->body.substr(pos + 6, end - pos - 6));
        pos = end + 2;
    }
    return out;
}

TEST_F(TopologyTest, NonFiniteLogitsFailTheRequestOnEveryTopology) {
    for (const std::string model : {"nan-head", "nan-all"}) {
        for (int n : {1, 2, 3}) {
            const std::string where = model + " on " + std::to_string(n) + " stage(s)";
            auto s = start_serve(k_skippy_binary, {"-m", model_path(model), "--stages", std::to_string(n), "-t", "1", "--lanes",
                                            "1", "-c", "256"});
            ASSERT_GT(s.port, 0) << (s.proc ? s.proc->stderr_text() : "did not start");
            const answer a = ask(s.port, "/v1/completions", R"({"prompt":"Hello","max_tokens":4,"temperature":0})");
            EXPECT_EQ(a.status, 500) << where << ": " << a.summary();
            EXPECT_NE(a.message.find("not finite"), std::string::npos) << where << ": " << a.message;

            const auto events = stream_events(
                s.port, "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"Hello"}],"max_tokens":4,"temperature":0,"stream":true})");
            ASSERT_FALSE(events.empty()) << where;
            EXPECT_EQ(std::count(events.begin(), events.end(), "[DONE]"), 0) << where;
            const json last = json::parse(events.back(), nullptr, false);
            ASSERT_TRUE(last.is_object() && last.contains("error")) << where << ": " << events.back();
            EXPECT_NE(last["error"]["message"].get<std::string>().find("not finite"), std::string::npos) << where;

            httplib::Client c("127.0.0.1", s.port);
            auto health = c.Get("/health");
            ASSERT_TRUE(health) << where;
            EXPECT_EQ(health->status, 200) << where;
            EXPECT_EQ(s.proc->stop(), 0) << where;

            std::string err;
            const int rc = run_to_completion({k_skippy_binary, "generate", "-m", model_path(model), "--stages", std::to_string(n),
                                              "-t", "1", "-p", "Hello", "-n", "4", "--greedy"},
                                             &err);
            EXPECT_NE(rc, 0) << where;
            EXPECT_NE(err.find("not finite"), std::string::npos) << where << ": " << err;
        }
    }
}

// A stage frozen (SIGSTOP) under `skippy serve --topology`: a non-stream request gets
// 504 naming the frozen stage within the deadline, a stream ends with an error event
// and no [DONE]; after SIGCONT the next request is answered.
TEST_F(TopologyTest, AFrozenStageIs504NamingItAndAStreamEndsWithAnErrorEvent) {
    const int ports[3] = {free_port(), free_port(), free_port()};
    json t;
    t["model"] = "m.gguf";  // relative to the topology file's folder
    t["stages"] = json::array();
    for (int i = 0; i < 3; ++i) {
        t["stages"].push_back({{"layers", {i, i + 1}}, {"endpoint", "127.0.0.1:" + std::to_string(ports[i])}});
    }
    const std::string topo = k_dir + "/frozen.json";
    std::ofstream(topo) << t.dump();
    // A short deadline everywhere, so the test waits about a second per request.
    const std::vector<std::string> deadline = {"--stage-step-timeout-ms", "1000", "--stage-step-ms-per-token", "20"};
    std::vector<std::unique_ptr<child_process>> stages;
    for (int i = 1; i < 3; ++i) {
        std::vector<std::string> argv = {k_binary, "serve-stage", "--topology", topo, "--stage", std::to_string(i), "-t", "1"};
        argv.insert(argv.end(), deadline.begin(), deadline.end());
        stages.push_back(child_process::spawn(argv));
        ASSERT_TRUE(stages.back() && stages.back()->wait_for_stderr("listening on")) << "stage " << i << " did not start";
    }
    std::vector<std::string> args = {"--topology", topo, "-t", "1", "--lanes", "1", "-c", "256"};
    args.insert(args.end(), deadline.begin(), deadline.end());
    auto s = start_serve(k_binary, args);
    ASSERT_GT(s.port, 0) << (s.proc ? s.proc->stderr_text() : "did not start");
    const std::string body = R"({"prompt":"Hello","max_tokens":4,"temperature":0})";
    const answer before = ask(s.port, "/v1/completions", body);
    ASSERT_EQ(before.status, 200) << before.message;

    ASSERT_EQ(::kill(stages[1]->pid(), SIGSTOP), 0);  // stage 2
    const auto t0 = std::chrono::steady_clock::now();
    const answer frozen = ask(s.port, "/v1/completions", body);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "the issue's bound";
    EXPECT_EQ(frozen.status, 504) << frozen.summary() << " " << frozen.message;
    EXPECT_EQ(frozen.code, "stage_timeout") << frozen.message;
    EXPECT_NE(frozen.message.find("stage 2 (127.0.0.1:" + std::to_string(ports[2])), std::string::npos)
        << frozen.message << "\nstage 1:\n" << stages[0]->stderr_text();

    const auto events = stream_events(s.port, "/v1/completions", R"({"prompt":"Hello","max_tokens":4,"temperature":0,"stream":true})");
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(std::count(events.begin(), events.end(), "[DONE]"), 0);
    const json last = json::parse(events.back(), nullptr, false);
    ASSERT_TRUE(last.is_object() && last.contains("error")) << events.back();
    EXPECT_EQ(last["error"]["code"], "stage_timeout") << events.back();

    ASSERT_EQ(::kill(stages[1]->pid(), SIGCONT), 0);
    const answer after = ask(s.port, "/v1/completions", body);
    EXPECT_EQ(after.status, 200) << after.message;
    EXPECT_EQ(after.summary(), before.summary()) << "the lane is re-dialed after SIGCONT";
    EXPECT_EQ(s.proc->stop(), 0);
}

}  // namespace
}  // namespace skippy::http
