/*
 * topicvault.sink._kafka_arrow: Kafka records into Arrow arrays, never as Python objects (issue #51.2).
 *
 * A Reader is a librdkafka consumer that reads assigned partitions and keeps each tracked range's
 * records as Arrow columns (key, value, offset, timestamp ms, timestamp type, headers), handed
 * to Python through the Arrow C data interface
 * (https://arrow.apache.org/docs/format/CDataInterface.html) as an "arrow_array" PyCapsule.
 * Only the record loop lives here (sink/kafka_reader.py, _NativeConsumption, keeps every rule
 * above it): per record, the same rules as the Python loop (_Consumption._read): skip records of
 * no tracked range or of a range done, meet the check record once, skip offsets already read,
 * end a range at its end offset or at its last offset. Events (errors, EOF) and check records go
 * back to Python in fetch order.
 *
 * It is built against Debian's librdkafka headers and resolves librdkafka's symbols at load time
 * from the library confluent-kafka ships (sink/native_reader.py loads it first, globally): the
 * Python path and this one run the same librdkafka. The restore direction, a Writer, is in
 * _kafka_arrow_writer.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_kafka_arrow.h"

/* In librdkafka >= 2.1 (the library loaded at run time); Debian 12's 2.0 header lacks it. */
int32_t rd_kafka_message_leader_epoch(const rd_kafka_message_t *rkmessage);

/* A growable byte buffer. */
typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* A binary (or string) column: int32 offsets, data, validity bitmap (exported only with nulls). */
typedef struct {
    Buf offsets, data, validity;
    int64_t length, nulls;
} BinCol;

static int bin_append(BinCol *c, const void *bytes, size_t n) {
    if (c->length == 0 && c->offsets.len == 0) {
        int32_t zero = 0;
        if (buf_put(&c->offsets, &zero, sizeof zero)) return -1;
    }
    if (c->data.len + n > INT32_MAX) return -2; /* more than one Arrow binary array holds */
    size_t byte = (size_t)(c->length / 8);
    if (byte >= c->validity.len) {
        char none = 0;
        if (buf_put(&c->validity, &none, 1)) return -1;
    }
    if (bytes) {
        c->validity.data[byte] |= (char)(1 << (c->length % 8));
        if (buf_put(&c->data, bytes, n)) return -1;
    } else {
        c->nulls++;
    }
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, sizeof end)) return -1;
    c->length++;
    return 0;
}

static void bin_free(BinCol *c) {
    free(c->offsets.data);
    free(c->data.data);
    free(c->validity.data);
    memset(c, 0, sizeof *c);
}

/* ---- Exporting: each node owns its buffers and children; release frees them all. ---- */

typedef struct {
    void *owned[3];
    const void *buffers[3];
    struct ArrowArray *children_storage;
    struct ArrowArray *children[6];
} Node;

static void release_node(struct ArrowArray *array) {
    Node *node = array->private_data;
    for (int64_t i = 0; i < array->n_children; i++) {
        if (node->children[i]->release) node->children[i]->release(node->children[i]);
    }
    for (int i = 0; i < 3; i++) free(node->owned[i]);
    free(node->children_storage);
    free(node);
    array->release = NULL;
}

/* Fill `out` as a node of `length` rows; buffers are taken over (NULL allowed where Arrow allows it). */
static int export_node(struct ArrowArray *out, int64_t length, int64_t nulls, int n_buffers, void **buffers,
                       int n_children) {
    Node *node = calloc(1, sizeof *node);
    if (!node) return -1;
    if (n_children) {
        node->children_storage = calloc((size_t)n_children, sizeof(struct ArrowArray));
        if (!node->children_storage) {
            free(node);
            return -1;
        }
        for (int i = 0; i < n_children; i++) node->children[i] = &node->children_storage[i];
    }
    for (int i = 0; i < n_buffers; i++) {
        node->owned[i] = buffers[i];
        node->buffers[i] = buffers[i];
    }
    *out = (struct ArrowArray){.length = length, .null_count = nulls, .offset = 0, .n_buffers = n_buffers,
                               .n_children = n_children, .buffers = node->buffers,
                               .children = n_children ? node->children : NULL, .dictionary = NULL,
                               .release = release_node, .private_data = node};
    return 0;
}

/* A buffer's data, never NULL (an empty column still gets a buffer: some importers insist). */
static void *take_buf(Buf *b) {
    void *data = b->data ? b->data : malloc(1);
    memset(b, 0, sizeof *b);
    return data;
}

static int export_bin(struct ArrowArray *out, BinCol *c) {
    if (c->offsets.len == 0) {
        int32_t zero = 0;
        if (buf_put(&c->offsets, &zero, sizeof zero)) return -1;
    }
    void *validity = NULL;
    if (c->nulls) {
        validity = take_buf(&c->validity);
    } else {
        free(c->validity.data);
        memset(&c->validity, 0, sizeof c->validity);
    }
    void *buffers[3] = {validity, take_buf(&c->offsets), take_buf(&c->data)};
    int rc = export_node(out, c->length, c->nulls, 3, buffers, 0);
    c->length = c->nulls = 0;
    return rc;
}

static int export_fixed(struct ArrowArray *out, Buf *b, int64_t length) {
    void *buffers[2] = {NULL, take_buf(b)};
    return export_node(out, length, 0, 2, buffers, 0);
}

/* ---- One tracked range: its read state and the columns of its records not yet taken. ---- */

typedef struct {
    char *topic;
    int32_t partition;
    int64_t next_offset, end, check_offset; /* check_offset < 0: no check record */
    int waiting, checking;
    BinCol keys, values, header_names, header_values;
    Buf offsets, stamps, types, header_offsets; /* int64, int64, int32, int32 */
    int64_t rows, value_bytes, other_bytes;
    int64_t last_offset;
    int32_t last_epoch;
} Slot;

static void slot_clear_columns(Slot *s) {
    bin_free(&s->keys);
    bin_free(&s->values);
    bin_free(&s->header_names);
    bin_free(&s->header_values);
    free(s->offsets.data);
    free(s->stamps.data);
    free(s->types.data);
    free(s->header_offsets.data);
    memset(&s->offsets, 0, sizeof s->offsets);
    memset(&s->stamps, 0, sizeof s->stamps);
    memset(&s->types, 0, sizeof s->types);
    memset(&s->header_offsets, 0, sizeof s->header_offsets);
    s->rows = s->value_bytes = s->other_bytes = 0;
}

/* Append one record; 0, -1 out of memory, -2 a column past 2 GiB. */
static int slot_append(Slot *s, rd_kafka_message_t *m) {
    int rc;
    if ((rc = bin_append(&s->keys, m->key, m->key_len))) return rc;
    if ((rc = bin_append(&s->values, m->payload, m->len))) return rc;
    int64_t offset = m->offset;
    rd_kafka_timestamp_type_t kind;
    int64_t stamp = rd_kafka_message_timestamp(m, &kind);
    /* Kafka's ids, as confluent_timestamp_type maps confluent-kafka's: log-append 1, else 0. */
    int32_t type = kind == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? 1 : 0;
    if (s->header_offsets.len == 0) {
        int32_t zero = 0;
        if (buf_put(&s->header_offsets, &zero, sizeof zero)) return -1;
    }
    rd_kafka_headers_t *headers = NULL;
    size_t header_bytes = 0;
    if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR && headers) {
        const char *name;
        const void *value;
        size_t size;
        for (size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             i++) {
            size_t name_len = strlen(name);
            if ((rc = bin_append(&s->header_names, name, name_len))) return rc;
            if ((rc = bin_append(&s->header_values, value, size))) return rc;
            header_bytes += name_len + size;
        }
    }
    int32_t header_end = (int32_t)s->header_names.length;
    if (buf_put(&s->offsets, &offset, sizeof offset) || buf_put(&s->stamps, &stamp, sizeof stamp) ||
        buf_put(&s->types, &type, sizeof type) || buf_put(&s->header_offsets, &header_end, sizeof header_end))
        return -1;
    s->rows++;
    s->value_bytes += (int64_t)m->len;
    s->other_bytes += (int64_t)(m->key_len + header_bytes);
    s->next_offset = offset + 1;
    s->last_offset = offset;
    s->last_epoch = rd_kafka_message_leader_epoch(m);
    return 0;
}

/* The slot's records as one struct array (key, value, offset, timestamp_ms, timestamp_type, headers). */
static int slot_export(Slot *s, struct ArrowArray *out) {
    int64_t rows = s->rows;
    if (s->header_offsets.len == 0) {
        int32_t zero = 0;
        if (buf_put(&s->header_offsets, &zero, sizeof zero)) return -1;
    }
    if (export_node(out, rows, 0, 1, (void *[]){NULL}, 6)) return -1;
    Node *node = out->private_data;
    struct ArrowArray **c = node->children;
    int64_t header_count = s->header_names.length;
    int rc = export_bin(c[0], &s->keys) || export_bin(c[1], &s->values) || export_fixed(c[2], &s->offsets, rows) ||
             export_fixed(c[3], &s->stamps, rows) || export_fixed(c[4], &s->types, rows);
    if (!rc) {
        void *list_buffers[2] = {NULL, take_buf(&s->header_offsets)};
        rc = export_node(c[5], rows, 0, 2, list_buffers, 1);
    }
    if (!rc) {
        struct ArrowArray *entries = ((Node *)c[5]->private_data)->children[0];
        rc = export_node(entries, header_count, 0, 1, (void *[]){NULL}, 2);
        if (!rc) {
            Node *entry_node = entries->private_data;
            rc = export_bin(entry_node->children[0], &s->header_names) ||
                 export_bin(entry_node->children[1], &s->header_values);
        }
    }
    slot_clear_columns(s);
    if (rc) {
        /* Children not exported have release NULL and are skipped. */
        out->release(out);
        return -1;
    }
    return 0;
}

/* ---- The Reader type. ---- */

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    Slot *slots;
    Py_ssize_t n_slots;
} Reader;

rd_kafka_conf_t *conf_from_dict(PyObject *config) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &name, &value)) {
        const char *n = PyUnicode_AsUTF8(name), *v = PyUnicode_AsUTF8(value);
        if (!n || !v) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
        if (rd_kafka_conf_set(conf, n, v, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            PyErr_SetString(PyExc_ValueError, errstr);
            return NULL;
        }
    }
    return conf;
}

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk, (void)level, (void)fac, (void)buf; /* errors reach the reader as events instead */
}

static void free_slots(Reader *self) {
    for (Py_ssize_t i = 0; i < self->n_slots; i++) {
        slot_clear_columns(&self->slots[i]);
        free(self->slots[i].topic);
    }
    free(self->slots);
    self->slots = NULL;
    self->n_slots = 0;
}

static void reader_close_handle(Reader *self) {
    if (self->rk) {
        Py_BEGIN_ALLOW_THREADS;
        if (self->queue) rd_kafka_queue_destroy(self->queue);
        rd_kafka_consumer_close(self->rk);
        rd_kafka_destroy(self->rk);
        Py_END_ALLOW_THREADS;
    }
    self->queue = NULL;
    self->rk = NULL;
}

static void reader_dealloc(Reader *self) {
    reader_close_handle(self);
    free_slots(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Reader(config: dict[str, str]): a consumer with librdkafka's `config`; ValueError names a
   setting librdkafka rejects, RuntimeError a consumer it cannot create. */
static int reader_init(Reader *self, PyObject *args, PyObject *kwargs) {
    PyObject *config;
    (void)kwargs;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &config)) return -1;
    char errstr[512];
    rd_kafka_conf_t *conf = conf_from_dict(config);
    if (!conf) return -1;
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    self->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (!self->rk) {
        PyErr_SetString(PyExc_ValueError, errstr);
        return -1;
    }
    rd_kafka_poll_set_consumer(self->rk);
    self->queue = rd_kafka_queue_get_consumer(self->rk);
    return 0;
}

static int check_open(Reader *self) {
    if (!self->rk) {
        PyErr_SetString(PyExc_RuntimeError, "reader closed");
        return -1;
    }
    return 0;
}

/* [(topic, partition[, offset])] -> a librdkafka partition list (NULL with an exception set). */
static rd_kafka_topic_partition_list_t *partition_list(PyObject *items, int with_offsets) {
    PyObject *seq = PySequence_Fast(items, "a list of (topic, partition[, offset])");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *topic;
        int partition;
        long long offset = RD_KAFKA_OFFSET_INVALID;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        int ok = with_offsets ? PyArg_ParseTuple(item, "siL", &topic, &partition, &offset)
                              : PyArg_ParseTuple(item, "si", &topic, &partition);
        if (!ok) {
            rd_kafka_topic_partition_list_destroy(list);
            Py_DECREF(seq);
            return NULL;
        }
        rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset;
    }
    Py_DECREF(seq);
    return list;
}

static PyObject *kafka_error(const char *what, rd_kafka_resp_err_t err) {
    PyErr_Format(PyExc_RuntimeError, "%s failed: %s", what, rd_kafka_err2str(err));
    return NULL;
}

/* assign([(topic, partition, offset)]): replaces the assignment, as Consumer.assign. */
static PyObject *reader_assign(Reader *self, PyObject *items) {
    if (check_open(self)) return NULL;
    rd_kafka_topic_partition_list_t *list = partition_list(items, 1);
    if (!list) return NULL;
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS;
    err = rd_kafka_assign(self->rk, list);
    Py_END_ALLOW_THREADS;
    rd_kafka_topic_partition_list_destroy(list);
    if (err) return kafka_error("assign", err);
    /* Messages fetched before this assignment are dropped by the record loop's rules as in Python. */
    Py_RETURN_NONE;
}

/* pause([(topic, partition)]). */
static PyObject *reader_pause(Reader *self, PyObject *items) {
    if (check_open(self)) return NULL;
    rd_kafka_topic_partition_list_t *list = partition_list(items, 0);
    if (!list) return NULL;
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS;
    err = rd_kafka_pause_partitions(self->rk, list);
    Py_END_ALLOW_THREADS;
    rd_kafka_topic_partition_list_destroy(list);
    if (err) return kafka_error("pause", err);
    Py_RETURN_NONE;
}

/* watermarks(topic, partition, timeout_ms) -> (low, high), asked of the broker. */
static PyObject *reader_watermarks(Reader *self, PyObject *args) {
    const char *topic;
    int partition, timeout_ms;
    if (check_open(self) || !PyArg_ParseTuple(args, "sii", &topic, &partition, &timeout_ms)) return NULL;
    int64_t low = -1, high = -1;
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS;
    err = rd_kafka_query_watermark_offsets(self->rk, topic, partition, &low, &high, timeout_ms);
    Py_END_ALLOW_THREADS;
    if (err) return kafka_error("watermarks", err);
    return Py_BuildValue("LL", (long long)low, (long long)high);
}

/* track([(topic, partition, next_offset, end, check_offset)]): the ranges the record loop reads
   (their slots numbered in this order), all waiting, with no records held. check_offset < 0: none. */
static PyObject *reader_track(Reader *self, PyObject *items) {
    PyObject *seq = PySequence_Fast(items, "a list of (topic, partition, next_offset, end, check_offset)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    free_slots(self);
    self->slots = calloc(n ? (size_t)n : 1, sizeof(Slot));
    if (!self->slots) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *topic;
        int partition;
        long long next_offset, end, check_offset;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "siLLL", &topic, &partition, &next_offset, &end,
                              &check_offset)) {
            Py_DECREF(seq);
            return NULL;
        }
        Slot *s = &self->slots[i];
        s->topic = strdup(topic);
        s->partition = partition;
        s->next_offset = next_offset;
        s->end = end;
        s->check_offset = check_offset;
        s->checking = check_offset >= 0;
        s->waiting = 1;
        s->last_offset = -1;
        s->last_epoch = -1;
        self->n_slots = i + 1;
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static Py_ssize_t slot_of(Reader *self, rd_kafka_message_t *m) {
    if (!m->rkt) return -1;
    const char *topic = rd_kafka_topic_name(m->rkt);
    for (Py_ssize_t i = 0; i < self->n_slots; i++) {
        if (self->slots[i].partition == m->partition && strcmp(self->slots[i].topic, topic) == 0) return i;
    }
    return -1;
}

/* What the loop found, in fetch order, for Python. */
enum { FOUND_BATCH = 0, FOUND_CHECK = 1, FOUND_EVENT = 2, FOUND_END = 3 };
typedef struct {
    int kind;
    Py_ssize_t slot;
    int64_t offset, at;
    int32_t epoch;
    int code;
    rd_kafka_message_t *event; /* FOUND_EVENT: the message, destroyed after Python saw it */
    struct ArrowArray *batch;  /* FOUND_BATCH */
} Found;

typedef struct {
    Found *items;
    size_t n, cap;
} FoundList;

static int found_add(FoundList *list, Found found) {
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        Found *items = realloc(list->items, cap * sizeof *items);
        if (!items) return -1;
        list->items = items;
        list->cap = cap;
    }
    list->items[list->n++] = found;
    return 0;
}

static int end_slot(Slot *s, Py_ssize_t slot, int64_t at, FoundList *found) {
    s->waiting = 0;
    return found_add(found, (Found){.kind = FOUND_END, .slot = slot, .at = at});
}

/* The record loop over one fetch (no Python objects, GIL released). Returns 0, or -1/-2 (a
   column full: out of memory, or past 2 GiB), the messages all destroyed or kept as events. */
static int read_messages(Reader *self, rd_kafka_message_t **messages, ssize_t count, int64_t batch_bytes,
                         FoundList *found, int64_t *value_bytes) {
    int failure = 0;
    for (ssize_t i = 0; i < count; i++) {
        rd_kafka_message_t *m = messages[i];
        if (failure) {
            rd_kafka_message_destroy(m);
            continue;
        }
        Py_ssize_t slot = slot_of(self, m);
        if (m->err) {
            /* A range an error or EOF reached takes no more records: Python ends it or fails. */
            if (slot >= 0 && self->slots[slot].waiting) self->slots[slot].waiting = 0;
            if (found_add(found, (Found){.kind = FOUND_EVENT, .slot = slot, .event = m})) {
                rd_kafka_message_destroy(m);
                failure = -1;
            }
            continue;
        }
        *value_bytes += (int64_t)m->len;
        if (slot < 0 || !self->slots[slot].waiting) {
            rd_kafka_message_destroy(m); /* a range already done, or fetched before the last assign() */
            continue;
        }
        Slot *s = &self->slots[slot];
        int64_t offset = m->offset;
        if (s->checking) {
            s->checking = 0;
            if (found_add(found, (Found){.kind = FOUND_CHECK, .slot = slot, .offset = offset,
                                         .epoch = rd_kafka_message_leader_epoch(m)}))
                failure = -1;
            if (offset == s->check_offset) {
                rd_kafka_message_destroy(m); /* the archive's record, met again: not read twice */
                continue;
            }
        }
        if (offset < s->next_offset) {
            rd_kafka_message_destroy(m); /* fetched again after a re-assign: already read */
            continue;
        }
        if (offset >= s->end) {
            failure = end_slot(s, slot, s->end, found);
            rd_kafka_message_destroy(m);
            continue;
        }
        int rc = slot_append(s, m);
        rd_kafka_message_destroy(m);
        if (rc) {
            failure = rc;
            continue;
        }
        if (s->value_bytes >= batch_bytes || s->other_bytes >= batch_bytes) {
            /* Large records: one fetch can return the whole read-ahead (tens of MiB). */
            struct ArrowArray *batch = malloc(sizeof *batch);
            Found cut = {.kind = FOUND_BATCH, .slot = slot, .offset = s->last_offset, .epoch = s->last_epoch,
                         .batch = batch};
            if (!batch || slot_export(s, batch)) {
                free(batch);
                failure = -1;
                continue;
            }
            if (found_add(found, cut)) {
                batch->release(batch);
                free(batch);
                failure = -1;
                continue;
            }
        }
        if (offset == s->end - 1) failure = end_slot(s, slot, s->end, found); /* read through: no EOF wait */
    }
    return failure;
}

static void release_capsule(PyObject *capsule) {
    struct ArrowArray *array = PyCapsule_GetPointer(capsule, "arrow_array");
    if (array) {
        if (array->release) array->release(array);
        free(array);
    }
}

static PyObject *found_to_python(Found *f) {
    switch (f->kind) {
    case FOUND_BATCH: {
        PyObject *capsule = PyCapsule_New(f->batch, "arrow_array", release_capsule);
        if (!capsule) {
            f->batch->release(f->batch);
            free(f->batch);
            return NULL;
        }
        return Py_BuildValue("(inNLi)", f->kind, f->slot, capsule, (long long)f->offset, (int)f->epoch);
    }
    case FOUND_CHECK:
        return Py_BuildValue("(inLi)", f->kind, f->slot, (long long)f->offset, (int)f->epoch);
    case FOUND_END:
        return Py_BuildValue("(inL)", f->kind, f->slot, (long long)f->at);
    default: {
        rd_kafka_message_t *m = f->event;
        const char *reason = m->payload ? rd_kafka_message_errstr(m) : rd_kafka_err2str(m->err);
        PyObject *item = Py_BuildValue("(inisiLs)", f->kind, f->slot, (int)m->err,
                                       m->rkt ? rd_kafka_topic_name(m->rkt) : "", (int)m->partition,
                                       (long long)m->offset, reason ? reason : "");
        return item;
    }
    }
}

/* fetch(limit, wait_ms, batch_bytes) -> (found, messages, value_bytes): up to `limit` messages
   already fetched, or else the first to come within wait_ms and those fetched with it
   (core.cluster.kafka.consume_ready's rule), run through the record loop. `found` lists, in fetch order,
   (0, slot, batch capsule, last offset, its leader epoch) for a range whose held records reached batch_bytes, (1, slot, offset,
   epoch) for a range's check record, (2, slot, code, topic, partition, offset, reason) for an event
   (slot -1: no tracked range), (3, slot, at) for a range that ended. */
static PyObject *reader_fetch(Reader *self, PyObject *args) {
    int limit, wait_ms;
    long long batch_bytes;
    if (check_open(self) || !PyArg_ParseTuple(args, "iiL", &limit, &wait_ms, &batch_bytes)) return NULL;
    if (limit < 1) limit = 1;
    rd_kafka_message_t **messages = malloc((size_t)limit * sizeof *messages);
    if (!messages) return PyErr_NoMemory();
    FoundList found = {0};
    ssize_t count;
    int64_t value_bytes = 0;
    int failure;
    Py_BEGIN_ALLOW_THREADS;
    count = rd_kafka_consume_batch_queue(self->queue, 0, messages, (size_t)limit);
    if (count == 0) {
        rd_kafka_message_t *first = rd_kafka_consume_queue(self->queue, wait_ms);
        if (first) {
            messages[0] = first;
            count = 1;
            if (limit > 1) {
                ssize_t more = rd_kafka_consume_batch_queue(self->queue, 0, messages + 1, (size_t)limit - 1);
                count += more > 0 ? more : 0;
            }
        }
    }
    if (count < 0) count = 0;
    failure = read_messages(self, messages, count, batch_bytes, &found, &value_bytes);
    Py_END_ALLOW_THREADS;
    free(messages);
    PyObject *list = failure ? NULL : PyList_New(0);
    for (size_t i = 0; i < found.n; i++) {
        Found *f = &found.items[i];
        if (list) {
            PyObject *item = found_to_python(f); /* owns a batch from here, even when it fails */
            if (!item || PyList_Append(list, item)) Py_CLEAR(list);
            Py_XDECREF(item);
        } else if (f->kind == FOUND_BATCH) {
            f->batch->release(f->batch);
            free(f->batch);
        }
        if (f->kind == FOUND_EVENT) rd_kafka_message_destroy(f->event);
    }
    free(found.items);
    if (failure == -2) {
        PyErr_SetString(PyExc_OverflowError, "a batch's column passed 2 GiB");
        return NULL;
    }
    if (failure) return PyErr_NoMemory();
    if (!list) return NULL;
    return Py_BuildValue("(NnL)", list, (Py_ssize_t)count, (long long)value_bytes);
}

/* held(slot) -> (records, value bytes, next offset or -1, checking). */
static PyObject *reader_held(Reader *self, PyObject *args) {
    Py_ssize_t slot;
    if (!PyArg_ParseTuple(args, "n", &slot)) return NULL;
    if (slot < 0 || slot >= self->n_slots) return PyErr_Format(PyExc_IndexError, "no slot %zd", slot);
    Slot *s = &self->slots[slot];
    return Py_BuildValue("(LLLi)", (long long)s->rows, (long long)s->value_bytes, (long long)s->next_offset,
                         s->checking);
}

/* take(slot) -> (batch capsule, last offset, its leader epoch): the records held, as one struct array. */
static PyObject *reader_take(Reader *self, PyObject *args) {
    Py_ssize_t slot;
    if (!PyArg_ParseTuple(args, "n", &slot)) return NULL;
    if (slot < 0 || slot >= self->n_slots) return PyErr_Format(PyExc_IndexError, "no slot %zd", slot);
    Slot *s = &self->slots[slot];
    long long last_offset = s->last_offset;
    int last_epoch = s->last_epoch;
    struct ArrowArray *batch = malloc(sizeof *batch);
    if (!batch || slot_export(s, batch)) {
        free(batch);
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(batch, "arrow_array", release_capsule);
    if (!capsule) {
        batch->release(batch);
        free(batch);
        return NULL;
    }
    return Py_BuildValue("(NLi)", capsule, last_offset, last_epoch);
}

static PyObject *reader_close(Reader *self, PyObject *unused) {
    (void)unused;
    reader_close_handle(self);
    Py_RETURN_NONE;
}

static PyMethodDef reader_methods[] = {
    {"assign", (PyCFunction)reader_assign, METH_O, "assign([(topic, partition, offset)])"},
    {"pause", (PyCFunction)reader_pause, METH_O, "pause([(topic, partition)])"},
    {"watermarks", (PyCFunction)reader_watermarks, METH_VARARGS, "watermarks(topic, partition, timeout_ms)"},
    {"track", (PyCFunction)reader_track, METH_O, "track([(topic, partition, next_offset, end, check_offset)])"},
    {"fetch", (PyCFunction)reader_fetch, METH_VARARGS, "fetch(limit, wait_ms, batch_bytes)"},
    {"held", (PyCFunction)reader_held, METH_VARARGS, "held(slot)"},
    {"take", (PyCFunction)reader_take, METH_VARARGS, "take(slot)"},
    {"close", (PyCFunction)reader_close, METH_NOARGS, "close()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "topicvault.sink._kafka_arrow.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka consumer whose record loop builds Arrow columns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
};

static PyObject *module_librdkafka_version(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    return PyUnicode_FromString(rd_kafka_version_str());
}

static PyMethodDef module_methods[] = {
    {"librdkafka_version", module_librdkafka_version, METH_NOARGS, "The librdkafka version loaded."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_kafka_arrow",
                                        "Kafka records between librdkafka and Arrow arrays in native code.", -1, module_methods,
                                        NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kafka_arrow(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(module, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(module);
        return NULL;
    }
    if (add_writer_type(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
