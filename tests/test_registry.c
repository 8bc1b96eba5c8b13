/* Registry lookups: built-in types, unknown names, user registration and duplicates. */
#include "core/registry.h"
#include "testing.h"

static bn_status noop_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    (void)l;
    *out = in;
    return BN_OK;
}

static bn_status noop_pass(bn_layer *l, const bn_pass *p)
{
    (void)l, (void)p;
    return BN_OK;
}

static const bn_layer_ops registry_test_ops = {
    .type = "registry_test_identity", .help = "test only",
    .setup = noop_setup, .forward_cpu = noop_pass, .backward_cpu = noop_pass,
};

static const bn_layer_ops incomplete_ops = {.type = "registry_test_incomplete", .setup = noop_setup};

BN_TEST(registry_finds_builtin_types)
{
    const char *types[] = {"dense", "conv2d", "maxpool", "avgpool", "relu", "sigmoid",
                           "tanh", "leaky_relu", "elu", "softmax_ce", "dropout"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const bn_layer_ops *ops = bn_find_layer(types[i]);
        CHECK_MSG(ops != NULL, "%s missing", types[i]);
        CHECK(strcmp(ops->type, types[i]) == 0);
    }
    CHECK(bn_find_layer("softmax_ce")->is_loss == 1);
    CHECK(bn_find_layer("dense")->is_loss == 0);
    return BN_PASS;
}

BN_TEST(registry_unknown_type_is_null)
{
    CHECK(bn_find_layer("no_such_layer") == NULL);
    CHECK(bn_find_layer("") == NULL);
    return BN_PASS;
}

BN_TEST(registry_user_type_registers_once)
{
    int before = bn_layer_type_count();
    if (!bn_find_layer(registry_test_ops.type)) {
        CHECK_OK(bn_register_layer(&registry_test_ops));
        CHECK(bn_layer_type_count() == before + 1);
    }
    CHECK(bn_find_layer("registry_test_identity") == &registry_test_ops);
    CHECK_ERR(bn_register_layer(&registry_test_ops), BN_ERR_USAGE, "already registered");
    CHECK_ERR(bn_register_layer(bn_find_layer("dense")), BN_ERR_USAGE, "'dense' is already registered");
    return BN_PASS;
}

BN_TEST(registry_refuses_incomplete_ops)
{
    CHECK_ERR(bn_register_layer(&incomplete_ops), BN_ERR_USAGE, "needs setup, forward_cpu and backward_cpu");
    CHECK(bn_find_layer("registry_test_incomplete") == NULL);
    CHECK_ERR(bn_register_layer(NULL), BN_ERR_USAGE, "without a name");
    return BN_PASS;
}
