#include "test_util.h"

#include <set>

using namespace trident;
using namespace trident::nn;
using namespace trident::testing;

namespace {

struct Block : UnaryModule {
  std::shared_ptr<Linear> fc;
  std::shared_ptr<LayerNorm> ln;
  Block(int64_t d) : UnaryModule("Block") {
    fc = register_module("fc", std::make_shared<Linear>(d, d));
    ln = register_module("ln", std::make_shared<LayerNorm>(Shape{d}));
  }
  Tensor forward(const Tensor& x) override { return ln->forward(add(x, fc->forward(x))); }
};

struct Net : Module {
  std::shared_ptr<Embedding> wte;
  std::shared_ptr<ModuleList<Block>> blocks;
  std::shared_ptr<BatchNorm2d> bn;
  Tensor scale;
  Net() : Module("Net") {
    wte = register_module("wte", std::make_shared<Embedding>(10, 4));
    blocks = register_module("blocks", std::make_shared<ModuleList<Block>>());
    blocks->push_back(std::make_shared<Block>(4));
    blocks->push_back(std::make_shared<Block>(4));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(3));
    scale = register_parameter("scale", ones({1}));
  }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& p : v) out.push_back(p.first);
  return out;
}

}  // namespace

TEST(Module, HierarchicalNamesInRegistrationOrder) {
  Net net;
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"scale", "wte.weight", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.ln.weight",
                                      "blocks.0.ln.bias", "blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.1.ln.weight",
                                      "blocks.1.ln.bias", "bn.weight", "bn.bias"}));
  EXPECT_EQ(names(net.named_buffers()),
            (std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(names(net.named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  const std::map<std::string, Tensor> sd = net.state_dict();
  EXPECT_EQ(sd.size(), 15u);
  EXPECT_TRUE(sd.count("bn.num_batches_tracked"));
  // 1 + 40 + 2 * (16 + 4 + 4 + 4) + 3 + 3
  EXPECT_EQ(net.num_parameters(), 1 + 40 + 2 * 28 + 6);
  std::vector<std::string> mods;
  auto self = std::make_shared<Net>();
  for (const auto& [name, m] : self->named_modules()) mods.push_back(name + ":" + m->type_name());
  EXPECT_EQ(mods, (std::vector<std::string>{":Net", "wte:Embedding", "blocks:ModuleList", "blocks.0:Block", "blocks.0.fc:Linear",
                                            "blocks.0.ln:LayerNorm", "blocks.1:Block", "blocks.1.fc:Linear",
                                            "blocks.1.ln:LayerNorm", "bn:BatchNorm2d"}));
}

TEST(Module, RegistrationErrors) {
  Module m("M");
  m.register_parameter("w", zeros({2}));
  EXPECT_THROW(m.register_parameter("w", zeros({2})), Error);
  EXPECT_THROW(m.register_buffer("w", zeros({2})), Error);
  EXPECT_THROW(m.register_parameter("a.b", zeros({2})), Error);
  EXPECT_THROW(m.register_parameter("i", zeros({2}, kI64)), Error);
  EXPECT_THROW(m.register_parameter("c", mul(zeros({2}).set_requires_grad(), 2.0)), Error);
  EXPECT_THROW(m.child("nothing"), Error);
  m.register_parameter("frozen", zeros({2}), /*requires_grad=*/false);
  EXPECT_EQ(m.num_parameters(/*trainable_only=*/true), 2);
  EXPECT_EQ(m.num_parameters(), 4);
}

TEST(Module, TiedParametersAreListedOnce) {
  Module m("Tied");
  auto a = m.register_module("a", std::make_shared<Linear>(3, 5));
  m.register_module("b", std::make_shared<Linear>(5, 3, /*bias=*/false));
  // The same tensor registered under a second name (tied weights): listed once, first name.
  auto c = m.register_module("c", std::make_shared<Module>("Holder"));
  c->register_parameter("shared", a->weight);
  EXPECT_EQ(m.num_parameters(), 15 + 5 + 15);
  EXPECT_EQ(names(m.named_parameters()), (std::vector<std::string>{"a.weight", "a.bias", "b.weight"}));
}

TEST(Module, TrainEvalReachesEveryModule) {
  auto seq = std::make_shared<Sequential>(
      std::initializer_list<std::shared_ptr<UnaryModule>>{std::make_shared<Linear>(4, 4), std::make_shared<Dropout>(0.5)});
  EXPECT_TRUE(seq->is_training());
  seq->eval();
  for (const auto& [name, m] : seq->named_modules()) EXPECT_FALSE(m->is_training()) << name;
  Tensor x = ones({2, 4});
  EXPECT_TRUE(all_close(seq->forward(x), seq->forward(x), 0, 0)) << "dropout is the identity in eval";
  seq->train();
  EXPECT_TRUE((*seq)[1]->is_training());
}

TEST(Module, ToDtypeKeepsHandlesValid) {
  Net net;
  Tensor w = net.blocks->operator[](0)->fc->weight;  // e.g. what an optimizer holds
  const std::vector<double> before = w.to_vector<double>();
  net.to(kF64);
  EXPECT_EQ(w.dtype(), kF64);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.to_vector<double>(), before);
  EXPECT_EQ(net.bn->running_mean.dtype(), kF64);
  EXPECT_EQ(net.bn->num_batches_tracked.dtype(), kI64) << "integer buffers stay";
  EXPECT_THROW(net.to(kI32), Error);
}

TEST(Module, ZeroGradAndApplyOrder) {
  Net net;
  sum(net.blocks->operator[](0)->forward(ones({2, 4}))).backward();
  EXPECT_TRUE(net.blocks->operator[](0)->fc->weight.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
  std::vector<std::string> order;
  net.blocks->operator[](0)->apply([&](Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "LayerNorm", "Block"}));
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  Net a, b;
  EXPECT_FALSE(all_close(a.wte->weight, b.wte->weight));  // different default-generator draws
  b.load_state_dict(a.state_dict());
  for (const auto& [name, t] : a.state_dict()) EXPECT_TRUE(all_close(t, b.state_dict().at(name), 0, 0)) << name;

  std::map<std::string, Tensor> bad = a.state_dict();
  bad.erase("scale");
  bad.erase("bn.bias");
  bad["extra.weight"] = zeros({1});
  bad["wte.weight"] = zeros({11, 4});
  try {
    b.load_state_dict(bad);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.message();
    for (const char* part : {"load_state_dict into Net", "2 missing", "bn.bias", "scale", "1 unexpected", "extra.weight",
                             "1 mismatched", "wte.weight", "[10, 4]", "[11, 4]"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  }
  const std::vector<std::string> skipped = b.load_state_dict(bad, /*strict=*/false);
  EXPECT_EQ(std::set<std::string>(skipped.begin(), skipped.end()),
            (std::set<std::string>{"scale", "bn.bias", "extra.weight", "wte.weight"}));
}

TEST(Module, PrintsATree) {
  Sequential s({std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(), std::make_shared<Linear>(8, 2, false)});
  EXPECT_EQ(s.str(),
            "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n  (1): ReLU()\n  (2): Linear(in_features=8, "
            "out_features=2, bias=false)\n)");
}
