/* test_checkpoint.c - safetensors checkpoints: bit-exact round trips of weights, optimizer
 * state (SGD's momentum, Adam's moments) and training state; the file read back as plain
 * safetensors; atomic saves that leave the old file alone when they fail; and one hand-made
 * broken file per error the loader names, each time checking that the network was left
 * untouched. */
#include "testing.h"

#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/device.h"
#include "core/optimizers/optimizers.h"
#include "core/status.h"
#include "io/json.h"
#include "train/checkpoint.h"

/* conv2d1.weight [2,1,3,3], conv2d1.bias [2], dense1.weight [3,32], dense1.bias [3]:
 * 119 floats, 476 bytes of weights, then as many of momentum. */
static const char *const MODEL =
    "[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\n[softmax_ce]\n";
#define NUM_PARAMS 119
#define WEIGHT_BYTES (4 * NUM_PARAMS)

typedef struct fixture {
    bn_net *net;
    bn_optimizer *opt;
    bn_train_state st;
} fixture;

static const char *tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", bn_test_tmpdir(), name);
    return buf;
}

/* Distinct values in every element, derived from base. */
static void fill(bn_blob *b, float base)
{
    float *p = bn_blob_host_wr(b);
    for (size_t i = 0; i < bn_blob_count(b); i++) p[i] = base + 0.013f * (float)i * ((i % 2) ? -1.0f : 1.0f);
}

/* A set-up net with the optimizer called optimizer, whose weights, optimizer state, iter and training
 * state all differ from their defaults, with a few awkward floats. Returns BN_PASS or BN_FAIL. */
static int make_fixture_of(fixture *f, const char *model, float base, const char *optimizer)
{
    memset(f, 0, sizeof *f);
    CHECK_OK(bn_net_from_text(model, "ckpt_test.cfg", &f->net));
    CHECK_OK(bn_net_setup(f->net, 2, NULL, 0, 7));
    CHECK(f->net->num_params == NUM_PARAMS);
    bn_train_config cfg = f->net->train;
    CHECK((cfg.optimizer = bn_optimizer_find(optimizer)) >= 0);
    cfg.seed = 2147483647; /* the seed of the progress below */
    CHECK_OK(bn_optimizer_create(f->net, &cfg, &f->opt));
    fill(f->net->params, base);
    for (int k = 0; k < f->opt->num_state; k++) fill(f->opt->state[k], -base / 3.0f - (float)k);
    float *w = bn_blob_host_wr(f->net->params);
    w[1] = -0.0f, w[2] = 1e-40f /* subnormal */, w[3] = FLT_MAX, w[4] = -FLT_MIN;
    f->opt->iter = 4321;
    f->st = (bn_train_state){.seed = 2147483647, .epoch = 3, .batch_in_epoch = 17, .step = 4321,
                             .epoch_loss_sum = 0.1 + 0.2, .epoch_correct = 33, .epoch_seen = 99, .examples = 640};
    return BN_PASS;
}

static int make_fixture(fixture *f, const char *model, float base)
{
    return make_fixture_of(f, model, base, "sgd");
}

static void free_fixture(fixture *f)
{
    bn_optimizer_free(f->opt);
    bn_net_free(f->net);
}

static float *copy_floats(bn_blob *b)
{
    float *c = malloc(bn_blob_count(b) * sizeof *c);
    if (c) memcpy(c, bn_blob_host_rd(b), bn_blob_count(b) * sizeof *c);
    return c;
}

static int same_floats(bn_blob *b, const float *ref)
{
    return memcmp(bn_blob_host_rd(b), ref, bn_blob_count(b) * sizeof *ref) == 0;
}

static int same_state(const bn_train_state *a, const bn_train_state *b)
{
    return a->seed == b->seed && a->epoch == b->epoch && a->batch_in_epoch == b->batch_in_epoch &&
           a->step == b->step && memcmp(&a->epoch_loss_sum, &b->epoch_loss_sum, sizeof(double)) == 0 &&
           memcmp(&a->epoch_correct, &b->epoch_correct, sizeof(double)) == 0 && a->epoch_seen == b->epoch_seen &&
           a->examples == b->examples;
}

/* ---- raw file helpers ---- */

static int write_raw(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A safetensors file with this header (no padding added) and data. */
static int write_parts(const char *path, const char *header, size_t hlen, const void *data, size_t dlen)
{
    unsigned char *buf = malloc(8 + hlen + dlen + 1);
    if (!buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    int r = write_raw(path, buf, 8 + hlen + dlen);
    free(buf);
    return r;
}

typedef struct file_parts {
    unsigned char *bytes;   /* the whole file */
    size_t size;
    char *header;           /* NUL-terminated copy of the header */
    size_t header_len;
    unsigned char *data;    /* points into bytes */
    size_t data_len;
} file_parts;

static int read_parts(const char *path, file_parts *p)
{
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    p->bytes = malloc((size_t)size + 1);
    int ok = p->bytes && size >= 8 && fread(p->bytes, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (!ok) return -1;
    p->size = (size_t)size;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p->bytes[i];
    if (n > p->size - 8 || !(p->header = malloc(n + 1))) return -1;
    memcpy(p->header, p->bytes + 8, n);
    p->header[n] = '\0';
    p->header_len = n;
    p->data = p->bytes + 8 + n;
    p->data_len = p->size - 8 - n;
    return 0;
}

static void free_parts(file_parts *p)
{
    free(p->bytes);
    free(p->header);
}

/* Copies src to dst with the first `from` in the header replaced by `to`; -1 if absent. */
static int edit_header(const char *src, const char *dst, const char *from, const char *to)
{
    file_parts p;
    if (read_parts(src, &p) != 0) return -1;
    char *at = strstr(p.header, from);
    int r = -1;
    if (at) {
        size_t head = (size_t)(at - p.header), fl = strlen(from), tl = strlen(to);
        size_t len = p.header_len - fl + tl;
        char *h = malloc(len + 1);
        if (h) {
            memcpy(h, p.header, head);
            memcpy(h + head, to, tl);
            memcpy(h + head + tl, at + fl, p.header_len - head - fl);
            r = write_parts(dst, h, len, p.data, p.data_len);
            free(h);
        }
    }
    free_parts(&p);
    return r;
}

/* Copies src to dst without the header entry `"name":{...}` (and its leading comma). */
static int drop_entry(const char *src, const char *dst, const char *name)
{
    char key[160], entry[512];
    snprintf(key, sizeof key, ",\"%s\":{", name);
    file_parts p;
    if (read_parts(src, &p) != 0) return -1;
    char *at = strstr(p.header, key);
    char *close = at ? strchr(at, '}') : NULL;
    int r = -1;
    if (close && (size_t)(close + 1 - at) < sizeof entry) {
        snprintf(entry, sizeof entry, "%.*s", (int)(close + 1 - at), at);
        r = edit_header(src, dst, entry, "");
    }
    free_parts(&p);
    return r;
}

/* Copies src to dst with the 4 data bytes at byte offset `at` of the data section set to v. */
static int poke_float(const char *src, const char *dst, size_t at, float v)
{
    file_parts p;
    if (read_parts(src, &p) != 0) return -1;
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int i = 0; i < 4; i++) p.data[at + (size_t)i] = (unsigned char)(u >> (8 * i));
    int r = write_raw(dst, p.bytes, p.size);
    free_parts(&p);
    return r;
}

static int has_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 1;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) found = 1;
    closedir(d);
    return found;
}

/* Fails unless bn_checkpoint_load(path) fails with code and needle, and leaves weights,
 * optimizer state, iter and training state exactly as they were. */
static int load_fails(fixture *f, const char *path, bn_status code, const char *needle)
{
    float *w = copy_floats(f->net->params), *m[BN_OPTIMIZER_MAX_STATE] = {NULL};
    CHECK(w);
    for (int k = 0; k < f->opt->num_state; k++) CHECK((m[k] = copy_floats(f->opt->state[k])) != NULL);
    bn_train_state st = f->st;
    long iter = f->opt->iter;
    CHECK_ERR(bn_checkpoint_load(path, f->net, f->opt, &st), code, needle);
    CHECK(strchr(bn_last_error(), '\n') == NULL);
    CHECK(same_floats(f->net->params, w));
    for (int k = 0; k < f->opt->num_state; k++) CHECK(same_floats(f->opt->state[k], m[k]));
    CHECK(f->opt->iter == iter && same_state(&st, &f->st));
    free(w);
    for (int k = 0; k < f->opt->num_state; k++) free(m[k]);
    return BN_PASS;
}

/* The same for bn_checkpoint_load_weights. */
static int load_weights_fails(fixture *f, const char *path, bn_status code, const char *needle)
{
    float *w = copy_floats(f->net->params);
    CHECK(w);
    CHECK_ERR(bn_checkpoint_load_weights(path, f->net), code, needle);
    CHECK(same_floats(f->net->params, w));
    free(w);
    return BN_PASS;
}

/* A fixture and a checkpoint of it at tmpdir/name. */
static int saved_fixture(fixture *f, char *path, size_t cap, const char *name)
{
    CHECK(make_fixture(f, MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(tmp_path(path, cap, name), f->net, f->opt, &f->st));
    return BN_PASS;
}

/* ---- round trips ---- */

BN_TEST(checkpoint_round_trip_is_bit_exact)
{
    fixture f;
    char path[512];
    CHECK(saved_fixture(&f, path, sizeof path, "round.safetensors") == BN_PASS);
    float *w = copy_floats(f.net->params), *m = copy_floats(f.opt->state[0]);
    CHECK(w && m);

    fill(f.net->params, 9.0f);
    fill(f.opt->state[0], 5.0f);
    f.opt->iter = 0;
    CHECK(!same_floats(f.net->params, w) && !same_floats(f.opt->state[0], m));
    bn_train_state st = {0};
    CHECK_OK(bn_checkpoint_load(path, f.net, f.opt, &st));
    CHECK(same_floats(f.net->params, w));
    CHECK(same_floats(f.opt->state[0], m));
    CHECK(f.opt->iter == 4321);
    CHECK(same_state(&st, &f.st));
    CHECK(st.seed == 2147483647 && st.epoch_loss_sum == 0.1 + 0.2 && st.examples == 640);
    const float *p = bn_blob_host_rd(f.net->params);
    CHECK(signbit(p[1]) && p[1] == 0.0f && p[2] == 1e-40f && p[3] == FLT_MAX);

    /* A fresh net of the same model (other initial values) takes the file too. */
    fixture g;
    CHECK(make_fixture(&g, MODEL, -3.0f) == BN_PASS);
    CHECK_OK(bn_checkpoint_load(path, g.net, g.opt, NULL));
    CHECK(same_floats(g.net->params, w) && same_floats(g.opt->state[0], m) && g.opt->iter == 4321);
    fill(g.net->params, 2.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, g.net));
    CHECK(same_floats(g.net->params, w));

    /* Saving again over the old file replaces it. */
    CHECK_OK(bn_checkpoint_save(path, g.net, NULL, NULL));
    CHECK_OK(bn_checkpoint_load(path, f.net, NULL, &st));
    CHECK(st.epoch == 0 && st.step == 0 && st.seed == 0);
    free(w);
    free(m);
    free_fixture(&f);
    free_fixture(&g);
    return BN_PASS;
}

BN_TEST(checkpoint_file_is_plain_safetensors)
{
    fixture f;
    char path[512];
    CHECK(saved_fixture(&f, path, sizeof path, "plain.safetensors") == BN_PASS);
    file_parts p;
    CHECK(read_parts(path, &p) == 0);
    CHECK((8 + p.header_len) % 8 == 0);
    CHECK(p.data_len == 2 * WEIGHT_BYTES);
    bn_json *h;
    CHECK_OK(bn_json_parse(p.header, p.header_len, &h));
    CHECK(h->type == BN_JSON_OBJECT && h->count == 1 + 2 * 4);

    const bn_json *meta = bn_json_get(h, "__metadata__");
    const char *want[][2] = {
        {"format", "blobnet"}, {"version", "2"},
        {"model", "input 1x6x6 mean=0 std=1\nconv2d1 conv2d <- input: filters=2 size=3\n"
                  "dense1 dense <- conv2d1: outputs=3\nsoftmax_ce1 softmax_ce <- dense1\n"},
        {"model_file", "ckpt_test.cfg"},
        {"settings", "batch=64 epochs=10 optimizer=sgd lr=0.01 momentum=0.9 weight_decay=0.0005 beta1=0.9 "
                     "beta2=0.999 eps=1e-08 lr_policy=fixed gamma=0.0001 power=0.75 stepsize=10000 lr_min=0 "
                     "pct_start=0.3 div_factor=25 final_div_factor=10000 warmup=0 bias_lr_mult=1 shift=0 flip=0 "
                     "pad=zero cutout=0"},
        {"seed", "2147483647"}, {"epoch", "3"}, {"batch_in_epoch", "17"}, {"step", "4321"}, {"iter", "4321"},
        {"epoch_loss_sum", "0.30000000000000004"}, {"epoch_correct", "33"}, {"epoch_seen", "99"},
        {"examples", "640"}, {"has_momentum", "1"}};
    CHECK(meta && meta->count == sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const bn_json *v = bn_json_get(meta, want[i][0]);
        CHECK_MSG(v && v->type == BN_JSON_STRING && strcmp(v->text, want[i][1]) == 0, "%s is %s", want[i][0],
                  v ? v->text : "missing");
    }

    /* Shapes by the rule in checkpoint.c; offsets contiguous, weights then momentum. */
    const struct {
        const char *name;
        const char *shape;
        uint64_t begin, end;
    } tensors[] = {{"conv2d1.weight", "2,1,3,3", 0, 72},  {"conv2d1.bias", "2", 72, 80},
                   {"dense1.weight", "3,32", 80, 464},     {"dense1.bias", "3", 464, 476},
                   {"momentum.conv2d1.weight", "2,1,3,3", 476, 548},
                   {"momentum.dense1.bias", "3", 940, 952}};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        const bn_json *t = bn_json_get(h, tensors[i].name);
        CHECK_MSG(t, "%s missing", tensors[i].name);
        CHECK(strcmp(bn_json_get(t, "dtype")->text, "F32") == 0);
        const bn_json *shape = bn_json_get(t, "shape"), *off = bn_json_get(t, "data_offsets");
        char got[64] = "";
        for (size_t k = 0; k < shape->count; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? "," : "", shape->items[k]->text);
        CHECK_MSG(strcmp(got, tensors[i].shape) == 0, "%s has shape %s", tensors[i].name, got);
        uint64_t b, e;
        CHECK(off->count == 2 && bn_json_u64(off->items[0], &b) && bn_json_u64(off->items[1], &e));
        CHECK_MSG(b == tensors[i].begin && e == tensors[i].end, "%s at [%llu,%llu]", tensors[i].name,
                  (unsigned long long)b, (unsigned long long)e);
    }
    /* The data are the slabs as little-endian float32, whatever this host's byte order. */
    const float *w = bn_blob_host_rd(f.net->params), *m = bn_blob_host_rd(f.opt->state[0]);
    for (size_t i = 0; i < NUM_PARAMS; i++) {
        uint32_t uw = 0, um = 0, bw, bm;
        for (int k = 3; k >= 0; k--) {
            uw = uw << 8 | p.data[4 * i + (size_t)k];
            um = um << 8 | p.data[WEIGHT_BYTES + 4 * i + (size_t)k];
        }
        memcpy(&bw, &w[i], 4);
        memcpy(&bm, &m[i], 4);
        CHECK_MSG(uw == bw && um == bm, "element %zu", i);
    }
    bn_json_free(h);
    free_parts(&p);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_without_optimizer_holds_weights_only)
{
    fixture f;
    char path[512];
    CHECK(make_fixture(&f, MODEL, 0.5f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(tmp_path(path, sizeof path, "weights.safetensors"), f.net, NULL, NULL));
    file_parts p;
    CHECK(read_parts(path, &p) == 0);
    CHECK(p.data_len == WEIGHT_BYTES);
    CHECK(strstr(p.header, "\"has_momentum\":\"0\"") && strstr(p.header, "\"iter\":\"0\""));
    CHECK(strstr(p.header, "\"epoch\":\"0\"") && !strstr(p.header, "momentum."));
    free_parts(&p);

    CHECK(load_fails(&f, path, BN_ERR_DATA, "holds no optimizer state (has_momentum is 0)") == BN_PASS);
    float *w = copy_floats(f.net->params);
    fill(f.net->params, 4.0f);
    bn_train_state st = f.st;
    CHECK_OK(bn_checkpoint_load(path, f.net, NULL, &st));
    CHECK(same_floats(f.net->params, w));
    CHECK(st.seed == 0 && st.epoch == 0 && st.step == 0 && st.epoch_loss_sum == 0.0 && st.epoch_seen == 0);
    fill(f.net->params, 4.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(same_floats(f.net->params, w));
    free(w);
    free_fixture(&f);
    return BN_PASS;
}

/* ---- atomic saves ---- */

/* Saves as an unprivileged user in a child process; 0 when that save failed as it should.
 * The answer comes back through a pipe, not the exit status, which valgrind may replace;
 * the child frees what it inherited (f, held) to keep valgrind's report of it clean. */
static int save_unprivileged(const char *path, fixture *f, file_parts *held)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char answer = '1';
        close(fds[0]);
        if (setgid(65534) == 0 && setuid(65534) == 0) {
            bn_status s = bn_checkpoint_save(path, f->net, f->opt, &f->st);
            if (s == BN_ERR_IO && strstr(bn_last_error(), path)) answer = '0';
        }
        free_fixture(f);
        free_parts(held);
        ssize_t wrote = write(fds[1], &answer, 1);
        _exit(wrote == 1 ? 0 : 1);
    }
    close(fds[1]);
    char answer = 0;
    ssize_t got = read(fds[0], &answer, 1);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return got == 1 && answer == '0' ? 0 : -1;
}

BN_TEST(checkpoint_save_to_unwritable_directory_keeps_old_file)
{
    fixture f;
    char dir[512], path[600];
    tmp_path(dir, sizeof dir, "readonly");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    file_parts before;
    CHECK(read_parts(path, &before) == 0);

    fill(f.net->params, 7.0f);
    CHECK(chmod(dir, 0555) == 0);
    if (geteuid() == 0) {
        /* root writes anywhere: drop to nobody, for whom the directory is closed. */
        CHECK(save_unprivileged(path, &f, &before) == 0);
    } else {
        CHECK_ERR(bn_checkpoint_save(path, f.net, f.opt, &f.st), BN_ERR_IO, "cannot save checkpoint");
        CHECK(strstr(bn_last_error(), path) && strstr(bn_last_error(), "Permission denied"));
    }
    CHECK(chmod(dir, 0755) == 0);

    file_parts after;
    CHECK(read_parts(path, &after) == 0);
    CHECK(after.size == before.size && memcmp(after.bytes, before.bytes, before.size) == 0);
    CHECK(!has_temp_files(dir));
    free_parts(&before);
    free_parts(&after);
    free_fixture(&f);
    return BN_PASS;
}

/* A write that fails half-way (the file-size limit stops it) removes its temporary file. */
BN_TEST(checkpoint_failed_write_removes_temp_file)
{
    fixture f;
    char dir[512], path[600];
    tmp_path(dir, sizeof dir, "fsize");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    file_parts before;
    CHECK(read_parts(path, &before) == 0);

    fill(f.net->params, 7.0f);
    struct rlimit old, small;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 512;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    bn_clear_error();
    bn_status s = bn_checkpoint_save(path, f.net, f.opt, &f.st);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK_MSG(s == BN_ERR_IO, "status %d: %s", (int)s, bn_last_error());
    CHECK(strstr(bn_last_error(), "cannot save checkpoint") && strstr(bn_last_error(), path));
    CHECK(strstr(bn_last_error(), "File too large"));

    file_parts after;
    CHECK(read_parts(path, &after) == 0);
    CHECK(after.size == before.size && memcmp(after.bytes, before.bytes, before.size) == 0);
    CHECK(!has_temp_files(dir));
    free_parts(&before);
    free_parts(&after);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_save_names_path_and_reason)
{
    fixture f;
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    CHECK_ERR(bn_checkpoint_save("/nonexistent-dir/ck.safetensors", f.net, f.opt, NULL), BN_ERR_IO,
              "cannot save checkpoint /nonexistent-dir/ck.safetensors");
    CHECK(strstr(bn_last_error(), "No such file or directory"));
    free_fixture(&f);
    return BN_PASS;
}

/* A save removes the temporary files that saves to the same path left when they were killed,
 * but not one that a save in progress holds (locked), nor files of other names. */
BN_TEST(checkpoint_save_removes_temporary_files_of_killed_saves)
{
    fixture f;
    char dir[512], path[600], name[700];
    tmp_path(dir, sizeof dir, "stale");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    static const char *const stale[] = {"ck.safetensors.tmp.Ab12Cd", "ck.safetensors.tmp.zzzzzz",
                                        "ck.safetensors.tmp.Held00"};
    static const char *const others[] = {"ck.safetensors.tmp.Ab12Cd7", "other.safetensors.tmp.Ab12Cd",
                                         "ck.safetensors.tmpx.Ab12Cd", "ck.safetensors.tmp.Ab-2Cd"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, stale[i]);
        CHECK(write_raw(name, "partial", 7) == 0);
    }
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, others[i]);
        CHECK(write_raw(name, "mine", 4) == 0);
    }
    /* A save in progress: its file locked through a descriptor of its own. */
    snprintf(name, sizeof name, "%s/%s", dir, stale[2]);
    int held = open(name, O_RDONLY);
    CHECK(held >= 0 && flock(held, LOCK_EX) == 0);

    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    for (size_t i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, stale[i]);
        CHECK_MSG((access(name, F_OK) == 0) == (i == 2), "%s %s", stale[i], i == 2 ? "was removed" : "is still there");
    }
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s/%s", dir, others[i]);
        CHECK_MSG(access(name, F_OK) == 0, "%s was removed", others[i]);
    }
    close(held);
    CHECK_OK(bn_checkpoint_save(path, f.net, f.opt, &f.st));
    snprintf(name, sizeof name, "%s/%s", dir, stale[2]);
    CHECK_MSG(access(name, F_OK) != 0, "%s is still there once no save holds it", stale[2]);
    free_fixture(&f);
    return BN_PASS;
}

/* ---- files the loader must refuse ---- */

BN_TEST(checkpoint_rejects_missing_and_short_files)
{
    fixture f;
    char path[512];
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    CHECK(load_fails(&f, tmp_path(path, sizeof path, "absent.safetensors"), BN_ERR_DATA,
                     "No such file or directory") == BN_PASS);
    CHECK(strstr(bn_last_error(), path));
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "cannot open checkpoint") == BN_PASS);
    CHECK(load_fails(&f, bn_test_tmpdir(), BN_ERR_DATA, "is not a regular file") == BN_PASS);

    CHECK(write_raw(tmp_path(path, sizeof path, "short.safetensors"), "\x10\0\0\0\0", 5) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "file is 5 bytes, too short") == BN_PASS);
    CHECK(write_raw(path, "", 0) == 0);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "file is 0 bytes") == BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_bad_header_length)
{
    fixture f;
    char path[512];
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    tmp_path(path, sizeof path, "len.safetensors");
    unsigned char zero[16] = {0};
    CHECK(write_raw(path, zero, sizeof zero) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "header length is 0") == BN_PASS);

    unsigned char past[16] = {0xE8, 0x03}; /* 1000 bytes of header in a 16-byte file */
    CHECK(write_raw(path, past, sizeof past) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "header length 1000 runs past the end of the file (16 bytes)") ==
          BN_PASS);

    unsigned char absurd[16] = {0, 0, 0, 0, 0, 1}; /* 2^40 */
    CHECK(write_raw(path, absurd, sizeof absurd) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "header length 1099511627776 is absurd") == BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_invalid_json_header)
{
    fixture f;
    char path[512];
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    tmp_path(path, sizeof path, "json.safetensors");
    CHECK(write_parts(path, "{\"a\":", 5, NULL, 0) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "header is not valid JSON at header byte 5: expected a value") ==
          BN_PASS);
    CHECK(write_parts(path, "{\"a\":1}x", 8, NULL, 0) == 0);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "at header byte 7: expected end of input") == BN_PASS);
    CHECK(write_parts(path, "[1,2]   ", 8, NULL, 0) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "header is a JSON array, not an object") == BN_PASS);
    CHECK(write_parts(path, "{\"__metadata__\":{\"format\":1}}", 29, NULL, 0) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "__metadata__ value of \"format\" is a number") == BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

/* One broken variant of a saved checkpoint: its header with `from` replaced by `to`, which
 * loading must refuse with a message containing `needle`. */
typedef struct header_edit {
    const char *from, *to, *needle;
} header_edit;

static int every_edit_fails(fixture *f, const char *src, const char *path, const header_edit *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(edit_header(src, path, cases[i].from, cases[i].to) == 0, "case %zu", i);
        CHECK_MSG(load_fails(f, path, BN_ERR_DATA, cases[i].needle) == BN_PASS, "case %zu", i);
    }
    return BN_PASS;
}

/* The same for the fixture saved as tmpdir/name, each broken variant written to name-bad. */
static int saved_edits_fail(const char *name, const header_edit *cases, size_t n)
{
    fixture f;
    char src[512], path[600];
    CHECK(saved_fixture(&f, src, sizeof src, name) == BN_PASS);
    snprintf(path, sizeof path, "%s-bad", src);
    int r = every_edit_fails(&f, src, path, cases, n);
    free_fixture(&f);
    return r;
}

BN_TEST(checkpoint_rejects_malformed_tensor_entries)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "entries.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "entries-bad.safetensors");
    const header_edit cases[] = {
        {"\"dtype\":\"F32\",", "", "tensor conv2d1.weight lacks \"dtype\""},
        {"\"shape\":[2,1,3,3],", "", "tensor conv2d1.weight lacks \"shape\""},
        {",\"data_offsets\":[0,72]", "", "tensor conv2d1.weight lacks \"data_offsets\""},
        {"{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]}", "7", "tensor conv2d1.weight is a number"},
        {"\"dtype\":\"F32\"", "\"dtype\":32", "dtype that is not a string"},
        {"[2,1,3,3]", "[2,1,-3,3]", "tensor conv2d1.weight: shape entry 2 is not a non-negative integer"},
        {"[2,1,3,3]", "[2,1,3.0,3]", "shape entry 2 is not a non-negative integer"},
        {"[2,1,3,3]", "[4294967296,4294967296,4294967296]", "element count overflows 64 bits"},
        {"[2,1,3,3]", "\"2x1x3x3\"", "shape that is not an array"},
        {"[0,72]", "[0,68]", "tensor conv2d1.weight: data_offsets [0,68] hold 68 bytes but shape [2,1,3,3] needs 72"},
        {"[0,72]", "[72,0]", "data_offsets must be [begin,end]"},
        {"[0,72]", "[0,72,0]", "data_offsets must be [begin,end]"},
        {"[940,952]", "[944,956]", "tensor momentum.dense1.bias: data_offsets end 956 is past the data section (952 bytes)"},
        {"\"iter\":\"4321\"", "\"iter\":\"4321\",\"iter\":\"1\"", "duplicate key \"iter\""},
    };
    CHECK(every_edit_fails(&f, src, path, cases, sizeof cases / sizeof cases[0]) == BN_PASS);
    /* A file cut short inside its data: the tensors' offsets run past what is left. */
    file_parts p;
    CHECK(read_parts(src, &p) == 0);
    CHECK(write_raw(path, p.bytes, p.size - 100) == 0);
    free_parts(&p);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "is past the data section (852 bytes)") == BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_wrong_dtype)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "dtype.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "dtype-bad.safetensors");
    CHECK(edit_header(src, path, "\"F32\"", "\"F16\"") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor conv2d1.weight has dtype F16; blobnet checkpoints hold F32") ==
          BN_PASS);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "has dtype F16") == BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_wrong_shape)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "shape.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "shape-bad.safetensors");
    /* Same element count, other shape: a transposed dense weight. */
    CHECK(edit_header(src, path, "[3,32]", "[32,3]") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor dense1.weight has shape [32,3] but the model expects [3,32]") ==
          BN_PASS);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "has shape [32,3]") == BN_PASS);
    /* The conv kernel written 4-d as [2,1,3,3], not flattened. */
    CHECK(edit_header(src, path, "[2,1,3,3]", "[2,9]") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor conv2d1.weight has shape [2,9] but the model expects [2,1,3,3]") ==
          BN_PASS);
    /* A momentum tensor is checked too when the optimizer is restored. */
    CHECK(edit_header(src, path, "\"momentum.dense1.weight\":{\"dtype\":\"F32\",\"shape\":[3,32]",
                      "\"momentum.dense1.weight\":{\"dtype\":\"F32\",\"shape\":[96]") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor momentum.dense1.weight has shape [96] but the model expects [3,32]") ==
          BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_missing_tensor)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "missing.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "missing-bad.safetensors");
    CHECK(drop_entry(src, path, "conv2d1.bias") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "parameter conv2d1.bias of the model is missing from the file") ==
          BN_PASS);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "conv2d1.bias of the model is missing") == BN_PASS);

    /* Without a momentum tensor the optimizer cannot resume, but the weights still load. */
    CHECK(drop_entry(src, path, "momentum.dense1.bias") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "momentum of dense1.bias (tensor momentum.dense1.bias) is missing") ==
          BN_PASS);
    float *w = copy_floats(f.net->params);
    fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(same_floats(f.net->params, w));
    free(w);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_extra_tensor)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "extra.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "extra-bad.safetensors");
    CHECK(edit_header(src, path, "\"dense1.bias\"", "\"dense9.bias\"") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor dense9.bias is not in the model") == BN_PASS);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "tensor dense9.bias is not in the model") == BN_PASS);

    /* A stray momentum entry: refused when resuming, ignored by a weights-only load. */
    CHECK(edit_header(src, path, "\"momentum.dense1.bias\"", "\"momentum.dense9.bias\"") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor momentum.dense9.bias is not in the model") == BN_PASS);
    float *w = copy_floats(f.net->params);
    fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(same_floats(f.net->params, w));
    free(w);
    /* Names from the file are printed on one line even when they hold control characters. */
    CHECK(edit_header(src, path, "\"dense1.bias\"", "\"dense1\\nbias\"") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor dense1?bias is not in the model") == BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

/* A model file may change in every way that leaves its layers alone: comments, [train] and
 * [augment], the order of keys, their spacing and the spelling of numbers. */
static const char *const SAME_LAYERS =
    "# the model of MODEL, written another way\n[train]\nepochs = 20\nlr = 0.5\n[input]\nwidth = 6\n"
    "height=6\nchannels = 1 ; a comment\nmean = 0.0\n[augment]\nshift = 1\n[conv2d]\nsize = 3\nfilters=2\n"
    "[dense]\n  outputs   =  3\n[softmax_ce]\n";

/* The description of MODEL as the header writes it (newlines escaped). */
#define MODEL_TEXT "input 1x6x6 mean=0 std=1\\nconv2d1 conv2d <- input: filters=2 size=3\\n" \
                   "dense1 dense <- conv2d1: outputs=3\\nsoftmax_ce1 softmax_ce <- dense1\\n"

BN_TEST(checkpoint_follows_the_layers_not_the_text)
{
    fixture f, g;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "layers.safetensors") == BN_PASS);
    float *w = copy_floats(f.net->params), *m = copy_floats(f.opt->state[0]);
    CHECK(w && m);
    CHECK(make_fixture(&g, SAME_LAYERS, 1.0f) == BN_PASS);
    CHECK(g.net->text_hash != f.net->text_hash && strcmp(g.net->description, f.net->description) == 0);
    bn_train_state st;
    CHECK_OK(bn_checkpoint_load(src, g.net, g.opt, &st));
    CHECK(same_floats(g.net->params, w) && same_floats(g.opt->state[0], m) && same_state(&st, &f.st));
    fill(g.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(src, g.net));
    CHECK(same_floats(g.net->params, w));
    free_fixture(&g);

    /* What changes the computation is another model, named at the first line that differs. */
    static const struct {
        const char *model, *needle;
    } others[] = {
        {"[input]\nchannels=1\nheight=6\nwidth=6\nmean=0.5\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\n"
         "[softmax_ce]\n",
         "the checkpoint has `input 1x6x6 mean=0 std=1` where the model has `input 1x6x6 mean=0.5 std=1`"},
        {"[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[relu]\n[dense]\noutputs=3\n"
         "[softmax_ce]\n",
         "the checkpoint has `dense1 dense <- conv2d1: outputs=3` where the model has `relu1 relu <- conv2d1`"},
        {"[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\noutputs=3\ninit=he\n"
         "[softmax_ce]\n",
         "the checkpoint has `dense1 dense <- conv2d1: outputs=3` where the model has "
         "`dense1 dense <- conv2d1: init=he outputs=3`"},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        char needle[600];
        CHECK(make_fixture(&g, others[i].model, 1.0f) == BN_PASS);
        snprintf(needle, sizeof needle, "%s was saved from a different model than ckpt_test.cfg: %s", src,
                 others[i].needle);
        CHECK_MSG(load_fails(&g, src, BN_ERR_DATA, needle) == BN_PASS, "model %zu", i);
        CHECK_MSG(load_weights_fails(&g, src, BN_ERR_DATA, needle) == BN_PASS, "model %zu", i);
        free_fixture(&g);
    }

    /* Without its model a file resumes nothing; its weights load by names and shapes alone. */
    tmp_path(path, sizeof path, "layers-none.safetensors");
    CHECK(edit_header(src, path, ",\"model\":\"" MODEL_TEXT "\"", "") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "__metadata__ lacks \"model\"") == BN_PASS);
    fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(same_floats(f.net->params, w));
    free(w);
    free(m);
    free_fixture(&f);
    return BN_PASS;
}

/* The file src as the format before descriptions wrote it (version 1, the model file's text hash,
 * no settings, no training set size) at dst. */
static int to_format_1(const char *src, const char *dst, uint64_t text_hash)
{
    char hash[64];
    snprintf(hash, sizeof hash, "\"version\":\"1\",\"model_hash\":\"%016llx\"", (unsigned long long)text_hash);
    CHECK(edit_header(src, dst, "\"version\":\"2\",\"model\":\"" MODEL_TEXT "\"", hash) == 0);
    file_parts p;
    CHECK(read_parts(dst, &p) == 0);
    char *from = strstr(p.header, ",\"settings\":\""), *to = from ? strstr(from, "\",\"seed\"") : NULL;
    char cut[1024];
    int ok = to && (size_t)(to + 2 - from) < sizeof cut;
    if (ok) snprintf(cut, sizeof cut, "%.*s", (int)(to + 1 - from), from);
    free_parts(&p);
    CHECK(ok && edit_header(dst, dst, cut, "") == 0);
    CHECK(edit_header(dst, dst, ",\"examples\":\"640\"", "") == 0);
    return BN_PASS;
}

/* Files of format 1 recorded a hash of the model file's text: they load while it is the same,
 * and when it has changed, as long as the tensors' names and shapes match the model. */
BN_TEST(checkpoint_of_format_1_still_loads)
{
    fixture f, g;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "old.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "old-1.safetensors");
    CHECK(to_format_1(src, path, f.net->text_hash) == BN_PASS);
    file_parts p;
    CHECK(read_parts(path, &p) == 0);
    CHECK(strstr(p.header, "\"version\":\"1\"") && !strstr(p.header, "\"model\"") && !strstr(p.header, "settings"));
    free_parts(&p);
    float *w = copy_floats(f.net->params);
    bn_train_state want = f.st, st;
    want.examples = 0;
    fill(f.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load(path, f.net, f.opt, &st));
    CHECK(same_floats(f.net->params, w) && same_state(&st, &want));

    CHECK(make_fixture(&g, SAME_LAYERS, 1.0f) == BN_PASS);
    CHECK_OK(bn_checkpoint_load(path, g.net, g.opt, &st));
    CHECK(same_floats(g.net->params, w));
    fill(g.net->params, 3.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, g.net));
    CHECK(same_floats(g.net->params, w));
    free_fixture(&g);
    bn_net *other;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\n"
                              "outputs=4\n[softmax_ce]\n", "other.cfg", &other));
    CHECK_OK(bn_net_setup(other, 2, NULL, 0, 7));
    CHECK_ERR(bn_checkpoint_load_weights(path, other), BN_ERR_DATA,
              "tensor dense1.weight has shape [3,32] but the model expects [4,32]");
    bn_net_free(other);

    CHECK(edit_header(path, path, "\"model_hash\":\"", "\"model_hash\":\"z") == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "metadata model_hash = \"z") == BN_PASS);
    CHECK(strstr(bn_last_error(), "is not 16 hex digits"));
    free(w);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_non_finite_values)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "nan.safetensors") == BN_PASS);
    tmp_path(path, sizeof path, "nan-bad.safetensors");
    /* In the last weight tensor, so that every earlier one was already staged. */
    CHECK(poke_float(src, path, 464 + 8, NAN) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor dense1.bias holds NaN at element 2") == BN_PASS);
    CHECK(load_weights_fails(&f, path, BN_ERR_DATA, "holds NaN") == BN_PASS);
    CHECK(poke_float(src, path, WEIGHT_BYTES + 4, -INFINITY) == 0);
    CHECK(load_fails(&f, path, BN_ERR_DATA, "tensor momentum.conv2d1.weight holds infinity at element 1") ==
          BN_PASS);
    free_fixture(&f);
    return BN_PASS;
}

BN_TEST(checkpoint_rejects_bad_metadata)
{
    const header_edit cases[] = {
        {"\"epoch\":\"3\"", "\"epoch\":\"3x\"", "metadata epoch = \"3x\" is not an integer"},
        {"\"epoch\":\"3\"", "\"epoch\":\" 3\"", "metadata epoch = \" 3\" is not an integer"},
        {"\"step\":\"4321\"", "\"step\":\"\"", "metadata step = \"\" is not an integer"},
        {"\"seed\":\"2147483647\"", "\"seed\":\"99999999999999999999\"", "metadata seed = \"99999999999999999999\" is "
                                                                          "outside 0..2147483647"},
        {"\"epoch_loss_sum\":\"", "\"epoch_loss_sum\":\"1.5.", "metadata epoch_loss_sum = \"1.5.0.3"},
        {"\"iter\":\"4321\",", "", "__metadata__ lacks \"iter\""},
        {"\"has_momentum\":\"1\"", "\"has_momentum\":\"yes\"", "metadata has_momentum = \"yes\" is not 0 or 1"},
        {"\"format\":\"blobnet\"", "\"format\":\"pytorch\"", "format is \"pytorch\", not \"blobnet\""},
        {"\"version\":\"2\"", "\"version\":\"3\"", "checkpoint version \"3\" is not supported (this blobnet reads 1 "
                                                   "and 2)"},
        {"\"__metadata__\"", "\"__other__\"", "no __metadata__; not a blobnet checkpoint"},
        {"\"settings\":\"batch=64 ", "\"settings\":\"batch=64  ", "metadata settings = \"batch=64  epochs"},
        {"\"settings\":\"batch=64 ", "\"settings\":\"batch ", "is not a list of key=value settings"},
    };
    return saved_edits_fail("meta.safetensors", cases, sizeof cases / sizeof cases[0]);
}

/* Every number of the progress is checked against what the model, the other fields and the
 * arithmetic that uses them allow, with a message naming the file and the field: a counter at
 * LONG_MAX would overflow the trainer's and optimizer's arithmetic, a negative epoch start a
 * million-epoch run, a NaN sum be blamed on the learning rate. The fixture was saved 99 examples
 * (17 steps) into epoch 4 of a set of 640, at step 4321. */
BN_TEST(checkpoint_range_checks_every_progress_field)
{
    const header_edit cases[] = {
        {"\"seed\":\"2147483647\"", "\"seed\":\"-1\"", "range.safetensors-bad: metadata seed = \"-1\" is outside "
                                                       "0..2147483647"},
        {"\"seed\":\"2147483647\"", "\"seed\":\"2147483648\"", "metadata seed = \"2147483648\" is outside"},
        {"\"epoch\":\"3\"", "\"epoch\":\"-1000000\"", "metadata epoch = \"-1000000\" is outside 0..1048576"},
        {"\"epoch\":\"3\"", "\"epoch\":\"3000000000\"", "metadata epoch = \"3000000000\" is outside 0..1048576"},
        {"\"batch_in_epoch\":\"17\"", "\"batch_in_epoch\":\"2000000000\"", "metadata batch_in_epoch = \"2000000000\" "
                                                                           "is outside 1..99"},
        {"\"batch_in_epoch\":\"17\"", "\"batch_in_epoch\":\"0\"", "metadata batch_in_epoch = \"0\" is outside 1..99"},
        {"\"step\":\"4321\"", "\"step\":\"9223372036854775807\"", "metadata step = \"9223372036854775807\" is outside "
                                                                  "4..8589934588"},
        {"\"step\":\"4321\"", "\"step\":\"3\"", "metadata step = \"3\" is outside 4..8589934588"},
        {"\"iter\":\"4321\"", "\"iter\":\"9223372036854775807\"", "metadata iter = \"9223372036854775807\" is outside "
                                                                  "4321..4321"},
        {"\"iter\":\"4321\"", "\"iter\":\"-5\"", "metadata iter = \"-5\" is outside 4321..4321"},
        {"\"epoch_seen\":\"99\"", "\"epoch_seen\":\"641\"", "metadata epoch_seen = \"641\" is outside 0..640"},
        {"\"epoch_seen\":\"99\"", "\"epoch_seen\":\"0\"", "metadata batch_in_epoch = \"17\" is outside 0..0"},
        {"\"examples\":\"640\"", "\"examples\":\"-1\"", "metadata examples = \"-1\" is outside 0..2147483647"},
        {"\"examples\":\"640\"", "\"examples\":\"98\"", "metadata epoch_seen = \"99\" is outside 0..98"},
        {"\"epoch_correct\":\"33\"", "\"epoch_correct\":\"100\"", "metadata epoch_correct = \"100\" is outside 0..99"},
        {"\"epoch_correct\":\"33\"", "\"epoch_correct\":\"33.5\"", "metadata epoch_correct = \"33.5\" is not a count"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"nan\"", "metadata epoch_loss_sum = "
                                                                                     "\"nan\" is outside 0..3.40282347e+38"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"inf\"", "epoch_loss_sum = \"inf\" is "
                                                                                     "outside"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"-1\"", "epoch_loss_sum = \"-1\" is "
                                                                                    "outside"},
        {"\"epoch_loss_sum\":\"0.30000000000000004\"", "\"epoch_loss_sum\":\"1e39\"", "epoch_loss_sum = \"1e39\" is "
                                                                                      "outside"},
    };
    CHECK(saved_edits_fail("range.safetensors", cases, sizeof cases / sizeof cases[0]) == BN_PASS);
    /* A file of weights alone has steps no optimizer took: iter is 0 there, and at most the step. */
    fixture f;
    char src[512], path[512];
    CHECK(make_fixture(&f, MODEL, 0.25f) == BN_PASS);
    tmp_path(src, sizeof src, "range-weights.safetensors");
    tmp_path(path, sizeof path, "range-weights-bad.safetensors");
    CHECK_OK(bn_checkpoint_save(src, f.net, NULL, &f.st));
    bn_train_state st;
    CHECK_OK(bn_checkpoint_load(src, f.net, NULL, &st));
    CHECK(edit_header(src, path, "\"iter\":\"0\"", "\"iter\":\"4322\"") == 0);
    CHECK_ERR(bn_checkpoint_load(path, f.net, NULL, &st), BN_ERR_DATA, "metadata iter = \"4322\" is outside 0..4321");
    free_fixture(&f);
    return BN_PASS;
}

/* A resume goes on from the example where the checkpoint stopped, in the order of examples drawn
 * for that epoch: it refuses a training set or seed that would draw another order mid-epoch, and
 * at the end of an epoch takes this run's settings, listing what changed. */
BN_TEST(checkpoint_resume_checks_the_place_against_the_run)
{
    fixture f;
    char src[512], needle[1400];
    CHECK(saved_fixture(&f, src, sizeof src, "resume.safetensors") == BN_PASS);
    bn_train_state st;
    bn_resume r = {.examples = 640};
    CHECK_OK(bn_checkpoint_resume(src, f.net, f.opt, &st, &r));
    CHECK_MSG(r.changes[0] == '\0', "changes: %s", r.changes);
    CHECK(same_state(&st, &f.st));

    r.examples = 600;
    snprintf(needle, sizeof needle, "%s was saved 99 examples into epoch 4 of a training set of 640 examples, and "
             "this run's has 600: the rest of the epoch would come in another order, so that some examples would be "
             "skipped and others seen twice; resume with the same training set (--train-limit 640) or from a "
             "checkpoint saved at the end of an epoch", src);
    CHECK_ERR(bn_checkpoint_resume(src, f.net, f.opt, &st, &r), BN_ERR_USAGE, needle);
    r.examples = 50;
    CHECK_ERR(bn_checkpoint_resume(src, f.net, f.opt, &st, &r), BN_ERR_USAGE,
              "was saved 99 examples into epoch 4, past the end of this run's training set of 50 examples");
    r.examples = 640;
    f.opt->cfg.seed = 5;
    CHECK_ERR(bn_checkpoint_resume(src, f.net, f.opt, &st, &r), BN_ERR_USAGE,
              "of a run with seed 2147483647, and this run's seed is 5: the rest of the epoch would come in another "
              "order");
    CHECK(strstr(bn_last_error(), "resume with --seed 2147483647 or from a checkpoint saved at the end of an epoch"));

    /* At the end of an epoch every setting may change; the new ones are used. */
    f.st = (bn_train_state){.seed = 2147483647, .epoch = 4, .step = 4400, .examples = 640};
    f.opt->iter = 4400;
    f.opt->cfg.seed = 2147483647;
    CHECK_OK(bn_checkpoint_save(src, f.net, f.opt, &f.st));
    f.opt->cfg.seed = 5;
    f.opt->cfg.lr = 0.5;
    f.opt->cfg.epochs = 20;
    f.net->augment = (bn_augment){.flip = 1, .pad = BN_AUGMENT_PAD_REFLECT, .cutout = 2};
    r.examples = 600;
    CHECK_OK(bn_checkpoint_resume(src, f.net, f.opt, &st, &r));
    CHECK_MSG(strcmp(r.changes, "epochs 10 -> 20, lr 0.01 -> 0.5, flip 0 -> 1, pad zero -> reflect, cutout 0 -> 2, "
                                "seed 2147483647 -> 5, training examples 640 -> 600") == 0, "changes: %s", r.changes);
    CHECK(st.seed == 5 && st.epoch == 4 && st.step == 4400 && st.epoch_seen == 0);
    /* A file saved before pad and cutout existed resumes; they are not listed as changes. */
    char old[512];
    tmp_path(old, sizeof old, "resume-before-cutout.safetensors");
    CHECK(edit_header(src, old, " pad=zero cutout=0\"", "\"") == 0);
    CHECK_OK(bn_checkpoint_resume(old, f.net, f.opt, &st, &r));
    CHECK_MSG(strcmp(r.changes, "epochs 10 -> 20, lr 0.01 -> 0.5, flip 0 -> 1, seed 2147483647 -> 5, training "
                                "examples 640 -> 600") == 0, "changes: %s", r.changes);
    CHECK(st.seed == 5 && st.epoch == 4 && st.step == 4400 && st.epoch_seen == 0);
    free_fixture(&f);
    return BN_PASS;
}

/* A plain safetensors file (no metadata, as NumPy or PyTorch would write it) loads as weights. */
BN_TEST(checkpoint_load_weights_reads_plain_safetensors)
{
    fixture f;
    char src[512], path[512];
    CHECK(saved_fixture(&f, src, sizeof src, "foreign.safetensors") == BN_PASS);
    file_parts p;
    CHECK(read_parts(src, &p) == 0);
    const char *start = strstr(p.header, "},\"conv2d1.weight\"");
    CHECK(start);
    char header[2048];
    snprintf(header, sizeof header, "{%s", start + 2); /* everything after the metadata */
    CHECK(write_parts(tmp_path(path, sizeof path, "foreign-plain.safetensors"), header, strlen(header), p.data,
                      p.data_len) == 0);
    free_parts(&p);
    float *w = copy_floats(f.net->params);
    fill(f.net->params, -1.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(same_floats(f.net->params, w));
    CHECK(load_fails(&f, path, BN_ERR_DATA, "no __metadata__") == BN_PASS);
    free(w);
    free_fixture(&f);
    return BN_PASS;
}

/* On the GPU path the newest values live on the device: save must read them from there and
 * load must leave the device seeing the file's values. */
BN_TEST(gpu_checkpoint_round_trip_syncs_device_copies)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(MODEL, "ckpt_test.cfg", &net));
    CHECK_OK(bn_net_setup(net, 2, ctx, 0, 7));
    bn_optimizer *opt;
    CHECK_OK(bn_optimizer_create(net, &net->train, &opt));
    float w[NUM_PARAMS], m[NUM_PARAMS], back[NUM_PARAMS];
    for (int i = 0; i < NUM_PARAMS; i++) w[i] = 0.5f - 0.01f * (float)i, m[i] = 0.002f * (float)i;
    float *dw = bn_blob_dev_wr(net->params), *dm = bn_blob_dev_wr(opt->state[0]);
    CHECK(dw && dm);
    CHECK_OK(bn_device_h2d(dw, w, sizeof w));
    CHECK_OK(bn_device_h2d(dm, m, sizeof m));
    char path[512];
    CHECK_OK(bn_checkpoint_save(tmp_path(path, sizeof path, "gpu.safetensors"), net, opt, NULL));

    CHECK_OK(bn_blob_zero(net->params)); /* on the device: the host copy goes stale */
    CHECK_OK(bn_blob_zero(opt->state[0]));
    CHECK(bn_blob_state(net->params) == BN_SYNC_DEVICE);
    CHECK_OK(bn_checkpoint_load(path, net, opt, NULL));
    CHECK_OK(bn_device_d2h(back, bn_blob_dev_rd(net->params), sizeof back));
    CHECK(memcmp(back, w, sizeof w) == 0);
    CHECK_OK(bn_device_d2h(back, bn_blob_dev_rd(opt->state[0]), sizeof back));
    CHECK(memcmp(back, m, sizeof m) == 0);
    bn_optimizer_free(opt);
    bn_net_free(net);
    return BN_PASS;
}

/* A layer may be named "momentum": its weights are not taken for optimizer state. */
BN_TEST(checkpoint_layer_named_momentum_round_trips)
{
    fixture f;
    char path[512];
    CHECK(make_fixture(&f, "[input]\nchannels=1\nheight=6\nwidth=6\n[conv2d]\nfilters=2\nsize=3\n[dense]\n"
                           "name=momentum\noutputs=3\n[softmax_ce]\n", 0.75f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(tmp_path(path, sizeof path, "named.safetensors"), f.net, f.opt, &f.st));
    float *w = copy_floats(f.net->params), *m = copy_floats(f.opt->state[0]);
    CHECK(w && m);
    fill(f.net->params, 2.0f);
    fill(f.opt->state[0], 2.0f);
    CHECK_OK(bn_checkpoint_load(path, f.net, f.opt, NULL));
    CHECK(same_floats(f.net->params, w) && same_floats(f.opt->state[0], m));
    fill(f.net->params, 2.0f);
    CHECK_OK(bn_checkpoint_load_weights(path, f.net));
    CHECK(same_floats(f.net->params, w));
    free(w);
    free(m);
    free_fixture(&f);
    return BN_PASS;
}

/* ---- Adam and AdamW ---- */

/* Copies of every state slab of f's optimizer. */
static int copy_state(const fixture *f, float *out[BN_OPTIMIZER_MAX_STATE])
{
    for (int k = 0; k < f->opt->num_state; k++) CHECK((out[k] = copy_floats(f->opt->state[k])) != NULL);
    return BN_PASS;
}

/* Adam's moments go into the file after the weights, as exp_avg.* and then exp_avg_sq.*, the
 * metadata names the optimizer, and a load gives all of it back bit for bit; AdamW's too. */
BN_TEST(checkpoint_adam_round_trip_is_bit_exact)
{
    static const char *const kinds[] = {"adam", "adamw"};
    for (int i = 0; i < 2; i++) {
        fixture f, g;
        char path[512];
        CHECK(make_fixture_of(&f, MODEL, 0.25f, kinds[i]) == BN_PASS);
        CHECK(f.opt->num_state == 2);
        CHECK_OK(bn_checkpoint_save(tmp_path(path, sizeof path, "adam.safetensors"), f.net, f.opt, &f.st));
        file_parts p;
        CHECK(read_parts(path, &p) == 0);
        CHECK(p.data_len == 3 * WEIGHT_BYTES && !strstr(p.header, "momentum."));
        bn_json *h;
        CHECK_OK(bn_json_parse(p.header, p.header_len, &h));
        CHECK(h->type == BN_JSON_OBJECT && h->count == 1 + 3 * 4);
        const bn_json *meta = bn_json_get(h, "__metadata__"), *name = bn_json_get(meta, "optimizer");
        CHECK(name && strcmp(name->text, kinds[i]) == 0);
        CHECK(strcmp(bn_json_get(meta, "has_momentum")->text, "1") == 0);
        const struct {
            const char *name;
            uint64_t begin, end;
        } tensors[] = {{"exp_avg.conv2d1.weight", 476, 548}, {"exp_avg.dense1.bias", 940, 952},
                       {"exp_avg_sq.conv2d1.weight", 952, 1024}, {"exp_avg_sq.dense1.bias", 1416, 1428}};
        for (size_t t = 0; t < sizeof tensors / sizeof tensors[0]; t++) {
            const bn_json *e = bn_json_get(h, tensors[t].name);
            CHECK_MSG(e, "%s missing", tensors[t].name);
            const bn_json *off = bn_json_get(e, "data_offsets");
            uint64_t b, end;
            CHECK(off->count == 2 && bn_json_u64(off->items[0], &b) && bn_json_u64(off->items[1], &end));
            CHECK_MSG(b == tensors[t].begin && end == tensors[t].end, "%s at [%llu,%llu]", tensors[t].name,
                      (unsigned long long)b, (unsigned long long)end);
        }
        bn_json_free(h);
        free_parts(&p);

        float *w = copy_floats(f.net->params), *m[BN_OPTIMIZER_MAX_STATE] = {NULL};
        CHECK(w && copy_state(&f, m) == BN_PASS);
        CHECK(make_fixture_of(&g, MODEL, -3.0f, kinds[i]) == BN_PASS);
        CHECK(!same_floats(g.opt->state[1], m[1]));
        bn_train_state st = {0};
        CHECK_OK(bn_checkpoint_load(path, g.net, g.opt, &st));
        CHECK(same_floats(g.net->params, w) && same_floats(g.opt->state[0], m[0]) &&
              same_floats(g.opt->state[1], m[1]));
        CHECK(g.opt->iter == 4321 && same_state(&st, &f.st));
        /* Weights alone, into a net whose optimizer is SGD: the moments are passed by. */
        fixture s;
        CHECK(make_fixture(&s, MODEL, 2.0f) == BN_PASS);
        CHECK_OK(bn_checkpoint_load_weights(path, s.net));
        CHECK(same_floats(s.net->params, w));
        free(w);
        free(m[0]);
        free(m[1]);
        free_fixture(&f);
        free_fixture(&g);
        free_fixture(&s);
    }
    return BN_PASS;
}

/* Resuming with another optimizer than the file's is refused in one line that names the file
 * and both optimizers; the weights and progress still load without an optimizer. A file that
 * names no optimizer holds SGD's state. */
BN_TEST(checkpoint_refuses_another_optimizers_state)
{
    fixture sgd, adam, adamw;
    char sgd_path[512], adam_path[512], path[512], needle[1200];
    CHECK(saved_fixture(&sgd, sgd_path, sizeof sgd_path, "by-sgd.safetensors") == BN_PASS);
    CHECK(make_fixture_of(&adam, MODEL, 0.5f, "adam") == BN_PASS);
    CHECK(make_fixture_of(&adamw, MODEL, 0.75f, "adamw") == BN_PASS);
    CHECK_OK(bn_checkpoint_save(tmp_path(adam_path, sizeof adam_path, "by-adam.safetensors"), adam.net, adam.opt,
                                &adam.st));
    snprintf(needle, sizeof needle, "%s holds the state of optimizer sgd, but this run's optimizer is adam", sgd_path);
    CHECK(load_fails(&adam, sgd_path, BN_ERR_DATA, needle) == BN_PASS);
    snprintf(needle, sizeof needle, "%s holds the state of optimizer adam, but this run's optimizer is sgd", adam_path);
    CHECK(load_fails(&sgd, adam_path, BN_ERR_DATA, needle) == BN_PASS);
    snprintf(needle, sizeof needle, "%s holds the state of optimizer adam, but this run's optimizer is adamw",
             adam_path);
    CHECK(load_fails(&adamw, adam_path, BN_ERR_DATA, needle) == BN_PASS);

    float *w = copy_floats(adam.net->params);
    CHECK(w);
    bn_train_state st = {0};
    CHECK_OK(bn_checkpoint_load(adam_path, sgd.net, NULL, &st));
    CHECK(same_floats(sgd.net->params, w) && same_state(&st, &adam.st));
    free(w);

    tmp_path(path, sizeof path, "by-adam-bad.safetensors");
    CHECK(edit_header(adam_path, path, ",\"optimizer\":\"adam\"", "") == 0);
    CHECK(load_fails(&adam, path, BN_ERR_DATA, "holds the state of optimizer sgd, but this run's optimizer is adam") ==
          BN_PASS);
    CHECK(edit_header(adam_path, path, "\"optimizer\":\"adam\"", "\"optimizer\":\"lion\"") == 0);
    CHECK(load_fails(&adam, path, BN_ERR_DATA, "metadata optimizer = \"lion\" is not an optimizer that blobnet knows") ==
          BN_PASS);
    CHECK(drop_entry(adam_path, path, "exp_avg_sq.dense1.bias") == 0);
    CHECK(load_fails(&adam, path, BN_ERR_DATA,
                     "exp_avg_sq of dense1.bias (tensor exp_avg_sq.dense1.bias) is missing from the file") == BN_PASS);
    CHECK(edit_header(adam_path, path, "\"exp_avg.dense1.bias\"", "\"momentum.dense1.bias\"") == 0);
    CHECK(load_fails(&adam, path, BN_ERR_DATA, "tensor momentum.dense1.bias is not in the model") == BN_PASS);
    free_fixture(&sgd);
    free_fixture(&adam);
    free_fixture(&adamw);
    return BN_PASS;
}
