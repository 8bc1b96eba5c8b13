/* test_util_checkpoint.c - what the checkpoint tests share (checkpoint_testing.h). */
#include "checkpoint_testing.h"

#include <dirent.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/optimizers/optimizers.h"
#include "testing.h"

const char *ck_tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", bn_test_tmpdir(), name);
    return buf;
}

/* Distinct values in every element, derived from base. */
void ck_fill(bn_blob *b, float base)
{
    float *p = bn_blob_host_wr(b);
    for (size_t i = 0; i < bn_blob_count(b); i++) p[i] = base + 0.013f * (float)i * ((i % 2) ? -1.0f : 1.0f);
}

/* A set-up net with the optimizer called optimizer, whose weights, optimizer state, iter and training
 * state all differ from their defaults, with a few awkward floats. Returns BN_PASS or BN_FAIL. */
int ck_make_fixture_of(ck_fixture *f, const char *model, float base, const char *optimizer)
{
    memset(f, 0, sizeof *f);
    CHECK_OK(bn_net_from_text(model, "ckpt_test.cfg", &f->net));
    CHECK_OK(bn_net_setup(f->net, 2, NULL, 0, 7));
    CHECK(f->net->num_params == CK_NUM_PARAMS);
    bn_train_config cfg = f->net->train;
    CHECK((cfg.optimizer = bn_optimizer_find(optimizer)) >= 0);
    cfg.seed = 2147483647; /* the seed of the progress below */
    CHECK_OK(bn_optimizer_create(f->net, &cfg, &f->opt));
    ck_fill(f->net->params, base);
    for (int k = 0; k < f->opt->num_state; k++) ck_fill(f->opt->state[k], -base / 3.0f - (float)k);
    float *w = bn_blob_host_wr(f->net->params);
    w[1] = -0.0f, w[2] = 1e-40f /* subnormal */, w[3] = FLT_MAX, w[4] = -FLT_MIN;
    f->opt->iter = 4321;
    f->st = (bn_train_state){.seed = 2147483647, .epoch = 3, .batch_in_epoch = 17, .step = 4321,
                             .epoch_loss_sum = 0.1 + 0.2, .epoch_correct = 33, .epoch_seen = 99, .examples = 640};
    return BN_PASS;
}

int ck_make_fixture(ck_fixture *f, const char *model, float base)
{
    return ck_make_fixture_of(f, model, base, "sgd");
}

void ck_free_fixture(ck_fixture *f)
{
    bn_optimizer_free(f->opt);
    bn_net_free(f->net);
}

float *ck_copy_floats(bn_blob *b)
{
    float *c = malloc(bn_blob_count(b) * sizeof *c);
    if (c) memcpy(c, bn_blob_host_rd(b), bn_blob_count(b) * sizeof *c);
    return c;
}

int ck_same_floats(bn_blob *b, const float *ref)
{
    return memcmp(bn_blob_host_rd(b), ref, bn_blob_count(b) * sizeof *ref) == 0;
}

int ck_same_state(const bn_train_state *a, const bn_train_state *b)
{
    return a->seed == b->seed && a->epoch == b->epoch && a->batch_in_epoch == b->batch_in_epoch &&
           a->step == b->step && memcmp(&a->epoch_loss_sum, &b->epoch_loss_sum, sizeof(double)) == 0 &&
           memcmp(&a->epoch_correct, &b->epoch_correct, sizeof(double)) == 0 && a->epoch_seen == b->epoch_seen &&
           a->examples == b->examples;
}

/* ---- raw file helpers ---- */

int ck_write_raw(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A safetensors file with this header (no padding added) and data. */
int ck_write_parts(const char *path, const char *header, size_t hlen, const void *data, size_t dlen)
{
    unsigned char *buf = malloc(8 + hlen + dlen + 1);
    if (!buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    int r = ck_write_raw(path, buf, 8 + hlen + dlen);
    free(buf);
    return r;
}

int ck_read_parts(const char *path, ck_file_parts *p)
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

void ck_free_parts(ck_file_parts *p)
{
    free(p->bytes);
    free(p->header);
}

/* Copies src to dst with the first `from` in the header replaced by `to`; -1 if absent. */
int ck_edit_header(const char *src, const char *dst, const char *from, const char *to)
{
    ck_file_parts p;
    if (ck_read_parts(src, &p) != 0) return -1;
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
            r = ck_write_parts(dst, h, len, p.data, p.data_len);
            free(h);
        }
    }
    ck_free_parts(&p);
    return r;
}

/* Copies src to dst without the header entry `"name":{...}` (and its leading comma). */
int ck_drop_entry(const char *src, const char *dst, const char *name)
{
    char key[160], entry[512];
    snprintf(key, sizeof key, ",\"%s\":{", name);
    ck_file_parts p;
    if (ck_read_parts(src, &p) != 0) return -1;
    char *at = strstr(p.header, key);
    char *close = at ? strchr(at, '}') : NULL;
    int r = -1;
    if (close && (size_t)(close + 1 - at) < sizeof entry) {
        snprintf(entry, sizeof entry, "%.*s", (int)(close + 1 - at), at);
        r = ck_edit_header(src, dst, entry, "");
    }
    ck_free_parts(&p);
    return r;
}

/* Copies src to dst with the 4 data bytes at byte offset `at` of the data section set to v. */
int ck_poke_float(const char *src, const char *dst, size_t at, float v)
{
    ck_file_parts p;
    if (ck_read_parts(src, &p) != 0) return -1;
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int i = 0; i < 4; i++) p.data[at + (size_t)i] = (unsigned char)(u >> (8 * i));
    int r = ck_write_raw(dst, p.bytes, p.size);
    ck_free_parts(&p);
    return r;
}

int ck_has_temp_files(const char *dir)
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
int ck_load_fails(ck_fixture *f, const char *path, bn_status code, const char *needle)
{
    float *w = ck_copy_floats(f->net->params), *m[BN_OPTIMIZER_MAX_STATE] = {NULL};
    CHECK(w);
    for (int k = 0; k < f->opt->num_state; k++) CHECK((m[k] = ck_copy_floats(f->opt->state[k])) != NULL);
    bn_train_state st = f->st;
    long iter = f->opt->iter;
    CHECK_ERR(bn_checkpoint_load(path, f->net, f->opt, &st), code, needle);
    CHECK(strchr(bn_last_error(), '\n') == NULL);
    CHECK(ck_same_floats(f->net->params, w));
    for (int k = 0; k < f->opt->num_state; k++) CHECK(ck_same_floats(f->opt->state[k], m[k]));
    CHECK(f->opt->iter == iter && ck_same_state(&st, &f->st));
    free(w);
    for (int k = 0; k < f->opt->num_state; k++) free(m[k]);
    return BN_PASS;
}

/* The same for bn_checkpoint_load_weights. */
int ck_load_weights_fails(ck_fixture *f, const char *path, bn_status code, const char *needle)
{
    float *w = ck_copy_floats(f->net->params);
    CHECK(w);
    CHECK_ERR(bn_checkpoint_load_weights(path, f->net), code, needle);
    CHECK(ck_same_floats(f->net->params, w));
    free(w);
    return BN_PASS;
}

/* A fixture and a checkpoint of it at tmpdir/name. */
int ck_saved_fixture(ck_fixture *f, char *path, size_t cap, const char *name)
{
    CHECK(ck_make_fixture(f, CK_MODEL, 0.25f) == BN_PASS);
    CHECK_OK(bn_checkpoint_save(ck_tmp_path(path, cap, name), f->net, f->opt, &f->st));
    return BN_PASS;
}
