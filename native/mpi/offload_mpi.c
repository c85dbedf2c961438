/*
 * The MPI calls offload-ts's MPI transport needs, and nothing else, as a Node-API addon:
 * init (MPI_THREAD_FUNNELED: only the JS thread calls MPI), rank/size, a non-blocking send of
 * one byte message straight from the caller's array (no copy: the array is referenced until the
 * send completes, and the transport's contract says it stays unchanged until then), the ids of
 * completed sends, a matched probe of the next message that has arrived and its receive (into
 * an array the caller chooses, so a payload can land in device memory; matched, so a message is
 * received exactly once), a blocking send for the last words before exit, abort, and finalize
 * (without its closing fence once a rank is gone), and huge pages for arrays sent again and again
 * (adviseHugePages). Nothing here blocks the event loop longer than a receive of a message that
 * has already arrived, or the collapse of the blocks of an array sent a third time (once each).
 */
#include <mpi.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>

/*
 * Open MPI's switch for MPI_Finalize's closing fence (a PMIx barrier over every rank of the job).
 * Weak: NULL under another MPI. A rank that died stays a member of that fence, and Open MPI 4.1
 * under `--enable-recovery` does not always drop it: then every living rank waits in
 * MPI_Finalize forever (seen on a loaded 2-CPU machine, about one run in ten). finalize(true)
 * turns the fence off once the hub knows a rank is gone.
 */
extern bool ompi_async_mpi_finalize __attribute__((weak));

#define CHECK(call)                                                           \
  do {                                                                        \
    if ((call) != napi_ok) {                                                  \
      napi_throw_error(env, NULL, "offload_mpi: Node-API call failed: " #call); \
      return NULL;                                                            \
    }                                                                         \
  } while (0)

typedef struct {
  MPI_Request request;
  /* Keeps the sender's Uint8Array (and so its bytes) alive until the send completes. */
  napi_ref ref;
  double id;
} Send;

static Send *sends = NULL;
static int send_count = 0, send_capacity = 0;
static double next_send_id = 1;
static int initialized = 0;

static napi_value throw_mpi(napi_env env, const char *what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  char message[MPI_MAX_ERROR_STRING + 64];
  snprintf(message, sizeof message, "%s failed: %s", what, text);
  napi_throw_error(env, "DEVICE_LOST", message);
  return NULL;
}

static napi_value number(napi_env env, double value) {
  napi_value result;
  napi_create_double(env, value, &result);
  return result;
}

static napi_value Init(napi_env env, napi_callback_info info) {
  (void)info;
  int provided = 0;
  if (!initialized) {
    int code = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Init_thread", code);
    /* Errors come back as codes (and become DEVICE_LOST), instead of aborting the job. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    initialized = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  int rank = 0, size = 0, flag = 0;
  int *tag_ub = NULL;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  napi_value result;
  CHECK(napi_create_object(env, &result));
  CHECK(napi_set_named_property(env, result, "rank", number(env, rank)));
  CHECK(napi_set_named_property(env, result, "size", number(env, size)));
  CHECK(napi_set_named_property(env, result, "threadLevel", number(env, provided)));
  CHECK(napi_set_named_property(env, result, "tagUpperBound", number(env, flag && tag_ub ? *tag_ub : 32767)));
  return result;
}

/* Reads (dest, tag, Uint8Array) arguments; copies the bytes so that the caller may reuse its array. */
static int send_args(napi_env env, napi_callback_info info, int *dest, int *tag, void **copy, size_t *length) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) return 0;
  if (napi_get_value_int32(env, argv[0], dest) != napi_ok || napi_get_value_int32(env, argv[1], tag) != napi_ok) return 0;
  napi_typedarray_type type;
  void *data;
  napi_value buffer;
  size_t offset;
  if (napi_get_typedarray_info(env, argv[2], &type, length, &data, &buffer, &offset) != napi_ok || type != napi_uint8_array) return 0;
  *copy = malloc(*length ? *length : 1);
  if (!*copy) return 0;
  memcpy(*copy, data, *length);
  return 1;
}

static napi_value Isend(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int dest, tag;
  napi_typedarray_type type;
  size_t length, offset;
  void *data;
  napi_value buffer;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 || napi_get_value_int32(env, argv[0], &dest) != napi_ok ||
      napi_get_value_int32(env, argv[1], &tag) != napi_ok ||
      napi_get_typedarray_info(env, argv[2], &type, &length, &data, &buffer, &offset) != napi_ok || type != napi_uint8_array) {
    napi_throw_type_error(env, "INVALID_ARGUMENT", "isend(dest: number, tag: number, data: Uint8Array)");
    return NULL;
  }
  if (send_count == send_capacity) {
    send_capacity = send_capacity ? send_capacity * 2 : 64;
    sends = realloc(sends, sizeof(Send) * send_capacity);
  }
  Send *send = &sends[send_count];
  /* ArrayBuffer memory does not move; the reference keeps it from being collected meanwhile. */
  CHECK(napi_create_reference(env, argv[2], 1, &send->ref));
  int code = MPI_Isend(data, (int)length, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &send->request);
  if (code != MPI_SUCCESS) {
    napi_delete_reference(env, send->ref);
    return throw_mpi(env, "MPI_Isend", code);
  }
  send->id = next_send_id++;
  send_count++;
  return number(env, send->id);
}

/* A blocking send, for the last message before finalize (no poll will run after it). */
static napi_value Send_(napi_env env, napi_callback_info info) {
  int dest, tag;
  void *copy;
  size_t length;
  if (!send_args(env, info, &dest, &tag, &copy, &length)) {
    napi_throw_type_error(env, "INVALID_ARGUMENT", "send(dest: number, tag: number, data: Uint8Array)");
    return NULL;
  }
  int code = MPI_Send(copy, (int)length, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
  free(copy);
  if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Send", code);
  return NULL;
}

static void free_received(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  free(data);
}

/* The ids of the sends completed since the last call. */
static napi_value Completed(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value sent;
  CHECK(napi_create_array(env, &sent));
  uint32_t sent_n = 0;
  for (int i = 0; i < send_count;) {
    int done = 0;
    MPI_Status status;
    int code = MPI_Test(&sends[i].request, &done, &status);
    if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Test", code);
    if (!done) {
      i++;
      continue;
    }
    napi_delete_reference(env, sends[i].ref);
    CHECK(napi_set_element(env, sent, sent_n++, number(env, sends[i].id)));
    sends[i] = sends[--send_count];
  }
  return sent;
}

/* The message matched by probe() and not yet received: one at a time. */
static MPI_Message matched;
static MPI_Status matched_status;
static int matched_count = -1;

/*
 * [source, tag, byte count] of the next message that has arrived, matched (so that exactly this
 * message is what receive() takes), or null when none has. Asked again before a receive, it
 * answers the same message.
 */
static napi_value Probe(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  if (matched_count < 0) {
    int flag = 0;
    int code = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &matched, &matched_status);
    if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Improbe", code);
    if (!flag) {
      CHECK(napi_get_null(env, &result));
      return result;
    }
    int count = 0;
    MPI_Get_count(&matched_status, MPI_BYTE, &count);
    matched_count = count;
  }
  CHECK(napi_create_array_with_length(env, 3, &result));
  CHECK(napi_set_element(env, result, 0, number(env, matched_status.MPI_SOURCE)));
  CHECK(napi_set_element(env, result, 1, number(env, matched_status.MPI_TAG)));
  CHECK(napi_set_element(env, result, 2, number(env, matched_count)));
  return result;
}

/*
 * Receives the probed message: straight into `into` when given (a Uint8Array of exactly the
 * message's length, e.g. device memory: no copy at all), else into a fresh array. Returns the
 * array the bytes are in.
 */
static napi_value Receive(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (matched_count < 0) {
    napi_throw_error(env, "INVALID_ARGUMENT", "receive() without a message from probe()");
    return NULL;
  }
  size_t count = (size_t)matched_count;
  napi_valuetype kind = napi_undefined;
  if (argc >= 1) CHECK(napi_typeof(env, argv[0], &kind));
  if (kind != napi_undefined) {
    napi_typedarray_type type;
    size_t length, offset;
    void *data;
    napi_value buffer;
    if (napi_get_typedarray_info(env, argv[0], &type, &length, &data, &buffer, &offset) != napi_ok || type != napi_uint8_array || length != count) {
      napi_throw_type_error(env, "INVALID_ARGUMENT", "receive(into?: Uint8Array of the probed message's length)");
      return NULL;
    }
    int code = MPI_Mrecv(data, (int)count, MPI_BYTE, &matched, MPI_STATUS_IGNORE);
    matched_count = -1;
    if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Mrecv", code);
    return argv[0];
  }
  void *data = malloc(count ? count : 1);
  if (!data) {
    napi_throw_error(env, "OUT_OF_MEMORY", "offload_mpi: no memory for a received message");
    return NULL;
  }
  int code = MPI_Mrecv(data, (int)count, MPI_BYTE, &matched, MPI_STATUS_IGNORE);
  matched_count = -1;
  if (code != MPI_SUCCESS) {
    free(data);
    return throw_mpi(env, "MPI_Mrecv", code);
  }
  napi_value buffer, view;
  CHECK(napi_create_external_arraybuffer(env, data, count, free_received, NULL, &buffer));
  CHECK(napi_create_typedarray(env, napi_uint8_array, count, buffer, 0, &view));
  return view;
}

/*
 * Huge pages for bulk data that is sent again and again. Open MPI moves a large message between
 * two ranks of one node with a single copy made by the receiver (CMA), which pins the sender's
 * pages one by one: from an ordinary array's 4 KiB pages a 64 MiB write took 16-30 ms, from huge
 * pages 9-15 ms (bench/README.md). So the 2 MiB blocks that a bulk send touches and that lie
 * wholly inside its ArrayBuffer are collapsed into huge pages (MADV_COLLAPSE: the contents stay,
 * Linux 6.1 and later) when the same bytes are sent a third time. A block counts the sends that
 * start where the first send that touched it started: a 64 MiB write sends 1 MiB chunks, two to
 * a block, and its second chunk is not its first sent again; the next write's first chunk is.
 * An array sent once or twice pays nothing. The collapse runs on the event loop, in the send that
 * is due, once per block: 0.6-0.8 ms a block in a loop here, 1.6-6.7 ms on a machine that had
 * just been busy; the third 64 MiB write took 33-45 ms against about 20. Run on a thread of
 * libuv's pool instead, beside the transfer, it cost that write 77-164 ms. Advice only: a kernel without it, THP turned off or memory too fragmented leaves
 * the pages as they were. Which blocks were seen is kept in a direct-mapped table of block
 * addresses: a collision or a freed and reused block costs at most a collapse too many or too
 * few, never a wrong byte.
 */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#define HUGE_PAGE ((uintptr_t)2 << 20)
#define SEEN_SLOTS 4096
/* The send of the same bytes that collapses their blocks: the third (two repeats). */
#define COLLAPSE_AT_REPEAT 2

typedef struct {
  uintptr_t block;
  /* Where the first send that touched the block started, and how often a send started there since. */
  uintptr_t first_send;
  unsigned repeats;
  bool collapsed;
} SeenBlock;

static SeenBlock seen[SEEN_SLOTS];

/* adviseHugePages(data: Uint8Array): how many 2 MiB blocks this call collapsed. */
static napi_value AdviseHugePages(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], buffer, byte_length;
  napi_typedarray_type type;
  size_t length, offset;
  void *data;
  double buffer_length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_typedarray_info(env, argv[0], &type, &length, &data, &buffer, &offset) != napi_ok || type != napi_uint8_array ||
      napi_get_named_property(env, buffer, "byteLength", &byte_length) != napi_ok ||
      napi_get_value_double(env, byte_length, &buffer_length) != napi_ok) {
    napi_throw_type_error(env, "INVALID_ARGUMENT", "adviseHugePages(data: Uint8Array)");
    return NULL;
  }
  /* The whole buffer, ArrayBuffer or SharedArrayBuffer (a device's memory): a block may extend past the view. */
  uintptr_t lo = (uintptr_t)data - offset, hi = lo + (uintptr_t)buffer_length;
  uintptr_t first = (uintptr_t)data & ~(HUGE_PAGE - 1), end = (uintptr_t)data + length;
  int collapsed = 0;
  for (uintptr_t block = first; block < end && length > 0; block += HUGE_PAGE) {
    if (block < lo || block + HUGE_PAGE > hi) continue;
    SeenBlock *slot = &seen[(block / HUGE_PAGE) % SEEN_SLOTS];
    if (slot->block != block) {
      slot->block = block;
      slot->first_send = (uintptr_t)data;
      slot->repeats = 0;
      slot->collapsed = false;
    } else if (!slot->collapsed && slot->first_send == (uintptr_t)data && ++slot->repeats == COLLAPSE_AT_REPEAT) {
      slot->collapsed = true;
      madvise((void *)block, HUGE_PAGE, MADV_HUGEPAGE);
      if (madvise((void *)block, HUGE_PAGE, MADV_COLLAPSE) == 0) collapsed++;
    }
  }
  return number(env, collapsed);
}

static napi_value Abort(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int code = 1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 1) napi_get_value_int32(env, argv[0], &code);
  MPI_Abort(MPI_COMM_WORLD, code);
  return NULL;
}

/* finalize(withoutFence: boolean): without the closing fence when a rank of the job is gone. */
static napi_value Finalize(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool without_fence = false;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc >= 1 && napi_get_value_bool(env, argv[0], &without_fence) != napi_ok) without_fence = false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    for (int i = 0; i < send_count; i++) {
      MPI_Cancel(&sends[i].request);
      MPI_Request_free(&sends[i].request);
      napi_delete_reference(env, sends[i].ref);
    }
    send_count = 0;
    if (without_fence && &ompi_async_mpi_finalize != NULL) ompi_async_mpi_finalize = true;
    int code = MPI_Finalize();
    if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Finalize", code);
  }
  return NULL;
}

static napi_value Module(napi_env env, napi_value exports) {
  napi_property_descriptor properties[] = {
      {"init", NULL, Init, NULL, NULL, NULL, napi_default, NULL},
      {"isend", NULL, Isend, NULL, NULL, NULL, napi_default, NULL},
      {"send", NULL, Send_, NULL, NULL, NULL, napi_default, NULL},
      {"completed", NULL, Completed, NULL, NULL, NULL, napi_default, NULL},
      {"probe", NULL, Probe, NULL, NULL, NULL, napi_default, NULL},
      {"receive", NULL, Receive, NULL, NULL, NULL, napi_default, NULL},
      {"adviseHugePages", NULL, AdviseHugePages, NULL, NULL, NULL, napi_default, NULL},
      {"abort", NULL, Abort, NULL, NULL, NULL, napi_default, NULL},
      {"finalize", NULL, Finalize, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof properties / sizeof properties[0], properties) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Module)
