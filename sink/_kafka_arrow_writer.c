/*
 * topicvault.sink._kafka_arrow.Writer: Arrow record columns into Kafka, never as Python objects
 * (issue #51.2, the restore direction).
 *
 * A Writer is a librdkafka producer of its own (rd_kafka_new from the config dict that
 * source/kafka_writer.restore_producer builds) whose produce_arrow() sends rows of one struct
 * array (key binary, value binary, timestamp_ms int64, headers list<struct<key string, value
 * binary>>) to one partition, in row order. Only the record loop lives here: the timestamp rule,
 * pacing, delivery accounting, the stall limit and the crash hooks stay in Python
 * (source/kafka_writer.py, source/restore/native_writer.py). Each record goes out as confluent-kafka's
 * Producer.produce sends it (its Producer.c, Producer_producev, and py_header_to_c in
 * confluent_kafka.c): RD_KAFKA_MSG_F_COPY; a null key or value as NULL, an empty one as a
 * zero-length non-NULL pointer; the timestamp as given (Python passes 0 for <= 0); header names
 * up to their first NUL (rd_kafka_header_add with name_size -1), a null header value as NULL,
 * an empty one as length 0; a record without headers with no header list.
 *
 * Failed deliveries are kept as their error codes until Python takes them (take_failures), as a
 * fatal error is (take_fatal) and log lines are (take_logs, for the logger confluent-kafka would
 * get), so no Python code runs inside librdkafka's callbacks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_kafka_arrow.h"

/* A log line kept for Python (level: syslog's, as librdkafka gives it). */
typedef struct {
    int level;
    char *facility, *text;
} LogLine;

/* Log lines kept between two take_logs calls at most; more are dropped (a flood says no more). */
#define MAX_LOG_LINES 1000

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    LogLine *logs;
    size_t n_logs;
    int *failures; /* error codes of failed deliveries not yet taken */
    size_t n_failures, cap_failures;
    int lost_failures; /* failures not kept (out of memory): still reported as one */
    int fatal;         /* a fatal error's code, 0 for none, until taken */
    char fatal_reason[512];
} Writer;

/* librdkafka calls these from rd_kafka_poll/flush, in the thread that polls (GIL released). */

static void writer_delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    Writer *self = opaque;
    if (!m->err) return;
    if (self->n_failures == self->cap_failures) {
        size_t cap = self->cap_failures ? self->cap_failures * 2 : 64;
        int *failures = realloc(self->failures, cap * sizeof *failures);
        if (!failures) {
            self->lost_failures = m->err;
            return;
        }
        self->failures = failures;
        self->cap_failures = cap;
    }
    self->failures[self->n_failures++] = m->err;
}

static void writer_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    (void)reason;
    Writer *self = opaque;
    /* As confluent-kafka's error_cb: only a fatal error is raised, from the next poll or flush. */
    if (err == RD_KAFKA_RESP_ERR__FATAL && !self->fatal)
        self->fatal = rd_kafka_fatal_error(rk, self->fatal_reason, sizeof self->fatal_reason);
}

/* With log.queue and rd_kafka_set_log_queue, librdkafka calls this from rd_kafka_poll only. */
static void writer_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    Writer *self = rd_kafka_opaque(rk);
    if (!self->logs) self->logs = calloc(MAX_LOG_LINES, sizeof *self->logs);
    if (!self->logs || self->n_logs == MAX_LOG_LINES) return;
    LogLine *line = &self->logs[self->n_logs];
    line->facility = strdup(fac);
    line->text = strdup(buf);
    if (!line->facility || !line->text) {
        free(line->facility);
        free(line->text);
        return;
    }
    line->level = level;
    self->n_logs++;
}

static void free_logs(Writer *self) {
    for (size_t i = 0; i < self->n_logs; i++) {
        free(self->logs[i].facility);
        free(self->logs[i].text);
    }
    self->n_logs = 0;
}

static void writer_close_handle(Writer *self) {
    if (self->rk) {
        Py_BEGIN_ALLOW_THREADS;
        rd_kafka_destroy(self->rk);
        Py_END_ALLOW_THREADS;
    }
    self->rk = NULL;
}

static void writer_dealloc(Writer *self) {
    writer_close_handle(self);
    free(self->failures);
    free_logs(self);
    free(self->logs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Writer(config: dict[str, str]): a producer with librdkafka's `config`; ValueError names a
   setting librdkafka rejects or a producer it cannot create. */
static int writer_init(Writer *self, PyObject *args, PyObject *kwargs) {
    PyObject *config;
    (void)kwargs;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &config)) return -1;
    char errstr[512];
    rd_kafka_conf_t *conf = conf_from_dict(config);
    if (!conf) return -1;
    rd_kafka_conf_set_opaque(conf, self);
    rd_kafka_conf_set_dr_msg_cb(conf, writer_delivered);
    rd_kafka_conf_set_error_cb(conf, writer_error);
    rd_kafka_conf_set_log_cb(conf, writer_log);
    /* Log lines through the main queue, served by poll in the polling thread (as confluent-kafka
       does for a client with a logger): no lock needed. */
    if (rd_kafka_conf_set(conf, "log.queue", "true", errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        PyErr_SetString(PyExc_ValueError, errstr);
        return -1;
    }
    self->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!self->rk) {
        PyErr_SetString(PyExc_ValueError, errstr);
        return -1;
    }
    rd_kafka_set_log_queue(self->rk, NULL);
    return 0;
}

static int writer_check_open(Writer *self) {
    if (!self->rk) {
        PyErr_SetString(PyExc_RuntimeError, "writer closed");
        return -1;
    }
    return 0;
}

/* ---- Reading the struct array's columns (offsets of a slice applied at every level). ---- */

static int is_valid(const struct ArrowArray *a, int64_t i) {
    const uint8_t *bits = a->buffers[0];
    return !bits || (bits[i / 8] >> (i % 8)) & 1;
}

/* Row `row` (the parent's offset applied) of a binary/string column: NULL for null, else the
   bytes (never NULL: an empty value is "") and their length. */
static const char *binary_at(const struct ArrowArray *a, int64_t row, size_t *len) {
    int64_t i = a->offset + row;
    *len = 0;
    if (!is_valid(a, i)) return NULL;
    const int32_t *offsets = a->buffers[1];
    const char *data = a->buffers[2];
    *len = (size_t)(offsets[i + 1] - offsets[i]);
    return data ? data + offsets[i] : "";
}

/* The schema produce_arrow reads (source/restore/native_writer.py, RECORDS_TYPE); 0 when it is. */
static int check_schema(const struct ArrowSchema *s) {
    static const char *formats[] = {"z", "z", "l", "+l"};
    if (strcmp(s->format, "+s") || s->n_children != 4) return -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(s->children[i]->format, formats[i])) return -1;
    const struct ArrowSchema *entry = s->children[3]->n_children == 1 ? s->children[3]->children[0] : NULL;
    if (!entry || strcmp(entry->format, "+s") || entry->n_children != 2) return -1;
    return strcmp(entry->children[0]->format, "u") || strcmp(entry->children[1]->format, "z") ? -1 : 0;
}

/* Record `row`'s headers (NULL for none), as py_headers_list_to_c builds them; `name` is scratch
   space for a NUL-terminated name. NULL with *failed set when out of memory. */
static rd_kafka_headers_t *headers_at(const struct ArrowArray *list, int64_t row, char **name, size_t *name_cap,
                                      int *failed) {
    int64_t i = list->offset + row;
    *failed = 0;
    if (!is_valid(list, i)) return NULL;
    const int32_t *offsets = list->buffers[1];
    int32_t first = offsets[i], end = offsets[i + 1];
    if (first == end) return NULL;
    const struct ArrowArray *entries = list->children[0];
    const struct ArrowArray *names = entries->children[0], *values = entries->children[1];
    rd_kafka_headers_t *headers = rd_kafka_headers_new((size_t)(end - first));
    for (int32_t e = first; e < end; e++) {
        size_t name_len, value_len;
        const char *name_bytes = binary_at(names, entries->offset + e, &name_len);
        const char *value = binary_at(values, entries->offset + e, &value_len);
        if (name_len + 1 > *name_cap) {
            char *grown = realloc(*name, name_len + 1);
            if (!grown) {
                rd_kafka_headers_destroy(headers);
                *failed = 1;
                return NULL;
            }
            *name = grown;
            *name_cap = name_len + 1;
        }
        memcpy(*name, name_bytes ? name_bytes : "", name_len);
        (*name)[name_len] = '\0';
        rd_kafka_header_add(headers, *name, -1, value, value ? (ssize_t)value_len : 0);
    }
    return headers;
}

/* Produce rows [start, length) of `records` in order until one is refused: the rows produced
   up to then, and the refusal's code (0: none). No Python object is touched (GIL released). */
static int64_t produce_rows(Writer *self, rd_kafka_topic_t *rkt, int32_t partition, const struct ArrowArray *records,
                            int64_t start, rd_kafka_resp_err_t *err) {
    const struct ArrowArray *keys = records->children[0], *values = records->children[1];
    const struct ArrowArray *stamps = records->children[2], *lists = records->children[3];
    const int64_t *millis = stamps->buffers[1];
    char *name = NULL;
    size_t name_cap = 0;
    int64_t row = start;
    *err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (; row < records->length; row++) {
        int64_t at = records->offset + row;
        size_t key_len, value_len;
        const char *key = binary_at(keys, at, &key_len), *value = binary_at(values, at, &value_len);
        int64_t stamp = is_valid(stamps, stamps->offset + at) ? millis[stamps->offset + at] : 0;
        int headers_failed;
        rd_kafka_headers_t *headers = headers_at(lists, at, &name, &name_cap, &headers_failed);
        if (headers_failed) {
            *err = RD_KAFKA_RESP_ERR__FAIL; /* out of memory */
            break;
        }
        *err = rd_kafka_producev(self->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(partition),
                                 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, key_len),
                                 RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_TIMESTAMP(stamp),
                                 RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_END);
        if (*err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (headers) rd_kafka_headers_destroy(headers); /* taken over only when produced */
            break;
        }
    }
    free(name);
    return row;
}

/* produce_arrow(topic, partition, schema capsule, array capsule, start) -> (produced, code):
   rows from `start` on until the end (code 0) or one librdkafka refuses (code: its error; a
   full local queue is -184, RD_KAFKA_RESP_ERR__QUEUE_FULL): `produced` is the row after the
   last one produced. TypeError for an array not of the records' schema. */
static PyObject *writer_produce_arrow(Writer *self, PyObject *args) {
    const char *topic;
    int partition;
    PyObject *schema_capsule, *array_capsule;
    long long start;
    if (writer_check_open(self) ||
        !PyArg_ParseTuple(args, "siOOL", &topic, &partition, &schema_capsule, &array_capsule, &start))
        return NULL;
    struct ArrowSchema *schema = PyCapsule_GetPointer(schema_capsule, "arrow_schema");
    struct ArrowArray *records = schema ? PyCapsule_GetPointer(array_capsule, "arrow_array") : NULL;
    if (!records) return NULL;
    if (check_schema(schema)) {
        PyErr_SetString(PyExc_TypeError, "produce_arrow takes struct<key binary, value binary, timestamp_ms int64, "
                                         "headers list<struct<key string, value binary>>>");
        return NULL;
    }
    if (start < 0 || start > records->length) return PyErr_Format(PyExc_IndexError, "no row %lld", start);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(self->rk, topic, NULL);
    if (!rkt) return PyErr_Format(PyExc_ValueError, "topic %s: %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
    rd_kafka_resp_err_t err;
    int64_t produced;
    Py_BEGIN_ALLOW_THREADS;
    produced = produce_rows(self, rkt, partition, records, start, &err);
    rd_kafka_topic_destroy(rkt);
    Py_END_ALLOW_THREADS;
    return Py_BuildValue("(Li)", (long long)produced, (int)err);
}

/* poll(timeout_ms) -> events served (delivery failures are kept for take_failures). */
static PyObject *writer_poll(Writer *self, PyObject *args) {
    int timeout_ms, served;
    if (writer_check_open(self) || !PyArg_ParseTuple(args, "i", &timeout_ms)) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    served = rd_kafka_poll(self->rk, timeout_ms);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(served);
}

/* flush(timeout_ms) -> records still held (rd_kafka_outq_len), as Producer.flush. */
static PyObject *writer_flush(Writer *self, PyObject *args) {
    int timeout_ms, held;
    if (writer_check_open(self) || !PyArg_ParseTuple(args, "i", &timeout_ms)) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    rd_kafka_flush(self->rk, timeout_ms);
    held = rd_kafka_outq_len(self->rk);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(held);
}

/* purge(flags) -> error code (flags: RD_KAFKA_PURGE_F_QUEUE 1, _INFLIGHT 2, _NON_BLOCKING 4). */
static PyObject *writer_purge(Writer *self, PyObject *args) {
    int flags;
    rd_kafka_resp_err_t err;
    if (writer_check_open(self) || !PyArg_ParseTuple(args, "i", &flags)) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    err = rd_kafka_purge(self->rk, flags);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(err);
}

/* metadata(topic, timeout_ms) -> error code of asking the brokers for the topic's metadata. */
static PyObject *writer_metadata(Writer *self, PyObject *args) {
    const char *topic;
    int timeout_ms;
    if (writer_check_open(self) || !PyArg_ParseTuple(args, "si", &topic, &timeout_ms)) return NULL;
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS;
    const struct rd_kafka_metadata *metadata = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(self->rk, topic, NULL);
    err = rkt ? rd_kafka_metadata(self->rk, 0, rkt, &metadata, timeout_ms) : rd_kafka_last_error();
    if (metadata) rd_kafka_metadata_destroy(metadata);
    if (rkt) rd_kafka_topic_destroy(rkt);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(err);
}

/* held() -> records the producer still holds (rd_kafka_outq_len, as len(Producer)). */
static PyObject *writer_held(Writer *self, PyObject *unused) {
    (void)unused;
    if (writer_check_open(self)) return NULL;
    return PyLong_FromLong(rd_kafka_outq_len(self->rk));
}

/* take_failures() -> [error code] of deliveries failed since the last call, in delivery order. */
static PyObject *writer_take_failures(Writer *self, PyObject *unused) {
    (void)unused;
    size_t count = self->n_failures + (self->lost_failures != 0);
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (!list) return NULL;
    for (size_t i = 0; i < self->n_failures; i++) PyList_SET_ITEM(list, i, PyLong_FromLong(self->failures[i]));
    if (self->lost_failures) PyList_SET_ITEM(list, count - 1, PyLong_FromLong(self->lost_failures));
    self->n_failures = 0;
    self->lost_failures = 0;
    return list;
}

/* take_fatal() -> (code, reason) of the producer's fatal error, once; None before one. */
static PyObject *writer_take_fatal(Writer *self, PyObject *unused) {
    (void)unused;
    if (!self->fatal) Py_RETURN_NONE;
    int code = self->fatal;
    self->fatal = -1; /* said once, as confluent-kafka raises it once */
    if (code == -1) Py_RETURN_NONE;
    return Py_BuildValue("(is)", code, self->fatal_reason);
}

/* take_logs() -> [(syslog level, facility, text)] of log lines since the last call, and the
   client's name. */
static PyObject *writer_take_logs(Writer *self, PyObject *unused) {
    (void)unused;
    PyObject *list = PyList_New((Py_ssize_t)self->n_logs);
    if (!list) return NULL;
    for (size_t i = 0; i < self->n_logs; i++) {
        LogLine *line = &self->logs[i];
        PyObject *item = Py_BuildValue("(iss)", line->level, line->facility, line->text);
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    free_logs(self);
    return Py_BuildValue("(Ns)", list, self->rk ? rd_kafka_name(self->rk) : "");
}

static PyObject *writer_close(Writer *self, PyObject *unused) {
    (void)unused;
    writer_close_handle(self);
    Py_RETURN_NONE;
}

static PyMethodDef writer_methods[] = {
    {"produce_arrow", (PyCFunction)writer_produce_arrow, METH_VARARGS,
     "produce_arrow(topic, partition, schema_capsule, array_capsule, start) -> (produced, code)"},
    {"poll", (PyCFunction)writer_poll, METH_VARARGS, "poll(timeout_ms) -> events served"},
    {"flush", (PyCFunction)writer_flush, METH_VARARGS, "flush(timeout_ms) -> records held"},
    {"purge", (PyCFunction)writer_purge, METH_VARARGS, "purge(flags) -> error code"},
    {"metadata", (PyCFunction)writer_metadata, METH_VARARGS, "metadata(topic, timeout_ms) -> error code"},
    {"held", (PyCFunction)writer_held, METH_NOARGS, "held() -> records held"},
    {"take_failures", (PyCFunction)writer_take_failures, METH_NOARGS, "take_failures() -> [error code]"},
    {"take_fatal", (PyCFunction)writer_take_fatal, METH_NOARGS, "take_fatal() -> (code, reason) or None"},
    {"take_logs", (PyCFunction)writer_take_logs, METH_NOARGS, "take_logs() -> ([(level, facility, text)], name)"},
    {"close", (PyCFunction)writer_close, METH_NOARGS, "close()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "topicvault.sink._kafka_arrow.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka producer whose record loop reads Arrow columns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)writer_init,
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_methods = writer_methods,
};

int add_writer_type(PyObject *module) {
    if (PyType_Ready(&WriterType) < 0) return -1;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(module, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        return -1;
    }
    return 0;
}
