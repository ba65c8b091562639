// Writes the fuzzer's seed corpus: one valid message of every kind, one file each.
// Usage: protocol_fuzz_seeds DIR
#include "protocol/protocol.h"
#include "sample_messages.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

bool write_file(const std::string & path, const std::vector<uint8_t> & bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char ** argv) {
    using namespace skippy::protocol;
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    bool ok = true;
    for (const request & r : testing::sample_requests()) {
        ok &= write_file(dir + "/request_" + std::string(message_kind_name(r.kind)) + ".bin", encode_request(r));
    }
    for (const reply & r : testing::sample_replies()) {
        ok &= write_file(dir + "/reply_" + std::string(message_kind_name(r.kind)) + ".bin", encode_reply(r));
    }
    ok &= write_file(dir + "/step.bin", encode_step(testing::sample_step()));
    ok &= write_file(dir + "/hello.bin", encode_hello(testing::sample_hello()));
    ok &= write_file(dir + "/hello_reply.bin", encode_hello_reply(testing::sample_hello_reply()));
    ok &= write_file(dir + "/auth_challenge.bin", encode_auth_challenge(testing::sample_auth_challenge()));
    if (!ok) {
        std::fprintf(stderr, "protocol_fuzz_seeds: cannot write to %s\n", dir.c_str());
        return 1;
    }
    return 0;
}
