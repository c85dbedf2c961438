/*
 * The MPI calls offload-ts's MPI transport needs, and nothing else, as a Node-API addon:
 * - init (MPI_THREAD_SERIALIZED: the JS thread and the progress thread below call MPI, one at
 *   a time), rank and size;
 * - a non-blocking send of one byte message straight from the caller's array (no copy: the
 *   array is referenced until the send completes, and the transport's contract says it stays
 *   unchanged until then), and the ids of completed sends;
 * - a matched probe of the next message that has arrived and its receive (into an array the
 *   caller chooses, so a payload can land in device memory; matched, so a message is received
 *   exactly once);
 * - a blocking send for the last words before exit, abort, and finalize (without its closing
 *   fence once a rank is gone);
 * - huge pages for arrays sent again and again (adviseHugePages);
 * - a progress thread that watches for messages while the event loop sleeps (startProgress).
 * Nothing here blocks the event loop longer than a receive of a message that has already
 * arrived, or the collapse of the blocks of an array sent a third time (once each).
 */
#include <mpi.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

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

/*
 * MPI calls made after init by the JS thread and the progress thread never overlap
 * (MPI_THREAD_SERIALIZED asks no more): the progress thread's hold mpi_lock, and so do the JS
 * thread's while the progress thread is armed (lock_for_mpi below). The JS thread says it is
 * waiting for the lock, and the progress thread, which would otherwise take it again at once,
 * lets it go first.
 */
static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int js_waiting = 0;

static void lock_for_js(void) {
  atomic_fetch_add(&js_waiting, 1);
  pthread_mutex_lock(&mpi_lock);
  atomic_fetch_sub(&js_waiting, 1);
}

static void unlock_for_js(void) { pthread_mutex_unlock(&mpi_lock); }

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

/*
 * The progress thread: while the event loop sleeps, it asks MPI whether a message has arrived
 * or a send completed, and wakes the loop (a thread-safe function call) when one has. The hub
 * (src/transport/mpi/hub.ts) polls MPI from the event loop itself while traffic is recent, and
 * arms this thread when it goes quiet, instead of polling on a 1 ms timer: a message after a
 * pause then waits for this thread's next look (at most PROGRESS_MAX_SLEEP_NS later), not for
 * the loop's next timer. Open MPI has no way to block until a message arrives (its blocking
 * calls spin), so the thread looks at intervals that grow while nothing happens:
 *   - while sends are in flight, again and again (yielding the CPU in between), for up to
 *     PROGRESS_SPIN_NS after the last event: a large message moves only while its sender calls
 *     into MPI; a send that never completes (its receiver stopped) must not keep a core busy;
 *   - otherwise after PROGRESS_MIN_SLEEP_NS, doubling to PROGRESS_MAX_SLEEP_NS, and after
 *     PROGRESS_IDLE_AFTER_NS of silence every PROGRESS_IDLE_SLEEP_NS (a rank that pauses between
 *     bursts of work costs a few thousand short wake-ups a second, one that idles about a
 *     thousand, as the 1 ms timer did).
 * Invariants (test/mpi-progress.test.ts model-checks them with the hub's side):
 *   - armed: the hub waits for a wake; the thread calls wake once, then disarms. Only the JS
 *     thread arms it (under mpi_lock). Arming happens after the hub's last poll, and the thread
 *     looks after being armed, so a message that arrived between the two is seen: no wake is
 *     lost.
 *   - The thread calls MPI only while armed and holding mpi_lock; so while it is disarmed the
 *     JS thread calls MPI without the lock (lock_for_mpi).
 *   - The thread never receives or completes anything: it only probes (MPI_Iprobe, without
 *     matching) and asks requests their status (MPI_Request_get_status, which frees nothing),
 *     so the JS thread alone decides what is received where, as without the thread.
 *   - stop is set and the thread joined before MPI_Finalize, and before the addon is unloaded.
 */
#define PROGRESS_SPIN_NS 10000000LL
#define PROGRESS_MIN_SLEEP_NS 10000L
#define PROGRESS_MAX_SLEEP_NS 100000L
#define PROGRESS_IDLE_SLEEP_NS 1000000L
#define PROGRESS_IDLE_AFTER_NS 100000000L

static pthread_t progress_thread;
static pthread_cond_t progress_cond;
static napi_threadsafe_function progress_wake = NULL;
static bool progress_running = false, progress_stop = false, progress_kicked = false;
/* Atomic: the JS thread reads it without the lock (lock_for_mpi). */
static atomic_bool progress_armed = false;
static double progress_wakes = 0;

/*
 * The JS thread's MPI calls take mpi_lock only while the progress thread is armed: only the JS
 * thread arms it, and a disarmed thread makes no MPI call (it sets progress_armed to false after
 * its last one, and waits), so a call that finds it disarmed cannot meet it. A rank that is
 * busy (the hub polls by itself) or runs without the thread pays nothing.
 */
static bool lock_for_mpi(void) {
  if (!atomic_load(&progress_armed)) return false;
  lock_for_js();
  return true;
}

static void unlock_after_mpi(bool locked) {
  if (locked) unlock_for_js();
}

static long long monotonic_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Whether a send in flight has completed (its request is left for completed() to free). */
static bool a_send_completed(void) {
  for (int i = 0; i < send_count; i++) {
    int done = 0;
    if (MPI_Request_get_status(sends[i].request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) return true;
  }
  return false;
}

static void *progress_main(void *unused) {
  (void)unused;
#ifdef __linux__
  /* Linux delays a sleeping thread's timer by 50 us by default: longer than most of its sleeps. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  long long last_event = monotonic_ns();
  long sleep_ns = PROGRESS_MIN_SLEEP_NS;
  pthread_mutex_lock(&mpi_lock);
  while (!progress_stop) {
    if (!progress_armed) {
      pthread_cond_wait(&progress_cond, &mpi_lock);
      sleep_ns = PROGRESS_MIN_SLEEP_NS;
      continue;
    }
    int arrived = 0;
    /* An error here is the JS thread's to see, on its next call: wake it. */
    bool failed = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS;
    if (arrived || failed || a_send_completed()) {
      progress_armed = false;
      progress_wakes++;
      napi_call_threadsafe_function(progress_wake, NULL, napi_tsfn_nonblocking);
      last_event = monotonic_ns();
      sleep_ns = PROGRESS_MIN_SLEEP_NS;
      continue;
    }
    if (progress_kicked) {
      /* A send was posted or the hub armed again: start looking often again. */
      progress_kicked = false;
      last_event = monotonic_ns();
      sleep_ns = PROGRESS_MIN_SLEEP_NS;
    }
    long long now = monotonic_ns();
    if ((send_count > 0 && now - last_event < PROGRESS_SPIN_NS) || atomic_load(&js_waiting) > 0) {
      pthread_mutex_unlock(&mpi_lock);
      sched_yield();
      pthread_mutex_lock(&mpi_lock);
      continue;
    }
    long wait_ns = now - last_event > PROGRESS_IDLE_AFTER_NS ? PROGRESS_IDLE_SLEEP_NS : sleep_ns;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += wait_ns;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    /* Sleeps without the lock; a kick (a send, arming, stop) ends the sleep early. */
    pthread_cond_timedwait(&progress_cond, &mpi_lock, &until);
    if (sleep_ns < PROGRESS_MAX_SLEEP_NS) sleep_ns = sleep_ns * 2 > PROGRESS_MAX_SLEEP_NS ? PROGRESS_MAX_SLEEP_NS : sleep_ns * 2;
  }
  pthread_mutex_unlock(&mpi_lock);
  return NULL;
}

/* Tells the progress thread something changed (a send posted): look now. Called without mpi_lock. */
static void kick_progress(void) {
  if (!progress_running || !atomic_load(&progress_armed)) return;
  pthread_mutex_lock(&mpi_lock);
  if (progress_armed) {
    progress_kicked = true;
    pthread_cond_signal(&progress_cond);
  }
  pthread_mutex_unlock(&mpi_lock);
}

static void call_wake(napi_env env, napi_value js_callback, void *context, void *data) {
  (void)context;
  (void)data;
  if (env == NULL || js_callback == NULL) return;
  napi_value undefined;
  if (napi_get_undefined(env, &undefined) != napi_ok) return;
  napi_call_function(env, undefined, js_callback, 0, NULL, NULL);
}

/* Ends the progress thread and waits for it: before MPI_Finalize, and when Node unloads the addon. */
static void stop_progress(void *unused) {
  (void)unused;
  if (!progress_running) return;
  pthread_mutex_lock(&mpi_lock);
  progress_stop = true;
  pthread_cond_signal(&progress_cond);
  pthread_mutex_unlock(&mpi_lock);
  pthread_join(progress_thread, NULL);
  progress_running = false;
  progress_armed = false;
  napi_release_threadsafe_function(progress_wake, napi_tsfn_abort);
  progress_wake = NULL;
}

/* startProgress(wake: () => void): starts the thread; wake runs on the event loop, once per arming. */
static napi_value StartProgress(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], name;
  napi_valuetype kind = napi_undefined;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_typeof(env, argv[0], &kind) != napi_ok ||
      kind != napi_function) {
    napi_throw_type_error(env, "INVALID_ARGUMENT", "startProgress(wake: () => void)");
    return NULL;
  }
  if (!initialized || progress_running) {
    napi_throw_error(env, "INVALID_ARGUMENT", "startProgress(): once, after init()");
    return NULL;
  }
  CHECK(napi_create_string_utf8(env, "offload-mpi-progress", NAPI_AUTO_LENGTH, &name));
  CHECK(napi_create_threadsafe_function(env, argv[0], NULL, name, 0, 1, NULL, NULL, NULL, call_wake, &progress_wake));
  /* Held only while the hub says so (awaitProgress): an idle application rank may exit. */
  CHECK(napi_unref_threadsafe_function(env, progress_wake));
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&progress_cond, &attributes);
  pthread_condattr_destroy(&attributes);
  progress_stop = false;
  progress_armed = false;
  if (pthread_create(&progress_thread, NULL, progress_main, NULL) != 0) {
    napi_release_threadsafe_function(progress_wake, napi_tsfn_abort);
    progress_wake = NULL;
    napi_throw_error(env, "UNSUPPORTED", "offload_mpi: could not start the progress thread");
    return NULL;
  }
  progress_running = true;
  CHECK(napi_add_env_cleanup_hook(env, stop_progress, NULL));
  return NULL;
}

/* awaitProgress(hold: boolean): arms the thread (wake runs once something happens); hold keeps the process alive meanwhile. */
static napi_value AwaitProgress(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool hold = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_bool(env, argv[0], &hold) != napi_ok) {
    napi_throw_type_error(env, "INVALID_ARGUMENT", "awaitProgress(hold: boolean)");
    return NULL;
  }
  if (!progress_running) return NULL;
  CHECK(hold ? napi_ref_threadsafe_function(env, progress_wake) : napi_unref_threadsafe_function(env, progress_wake));
  lock_for_js();
  progress_armed = true;
  progress_kicked = true;
  pthread_cond_signal(&progress_cond);
  unlock_for_js();
  return NULL;
}

/* disarmProgress(): the hub polls by itself again; a wake already on its way still comes. */
static napi_value DisarmProgress(napi_env env, napi_callback_info info) {
  (void)info;
  if (!progress_running) return NULL;
  CHECK(napi_unref_threadsafe_function(env, progress_wake));
  lock_for_js();
  progress_armed = false;
  unlock_for_js();
  return NULL;
}

/* progressWakes(): how often the progress thread has woken the event loop (diagnostics, tests). */
static napi_value ProgressWakes(napi_env env, napi_callback_info info) {
  (void)info;
  lock_for_js();
  double wakes = progress_wakes;
  unlock_for_js();
  return number(env, wakes);
}

static napi_value Init(napi_env env, napi_callback_info info) {
  (void)info;
  int provided = 0;
  if (!initialized) {
    int code = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
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
  napi_value progress;
  CHECK(napi_get_boolean(env, provided >= MPI_THREAD_SERIALIZED, &progress));
  CHECK(napi_set_named_property(env, result, "progressThread", progress));
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
  /* ArrayBuffer memory does not move; the reference keeps it from being collected meanwhile. */
  napi_ref ref;
  CHECK(napi_create_reference(env, argv[2], 1, &ref));
  bool locked = lock_for_mpi();
  if (send_count == send_capacity) {
    int capacity = send_capacity ? send_capacity * 2 : 64;
    Send *grown = realloc(sends, sizeof(Send) * capacity);
    if (!grown) {
      unlock_after_mpi(locked);
      napi_delete_reference(env, ref);
      napi_throw_error(env, "OUT_OF_MEMORY", "offload_mpi: no memory for another send in flight");
      return NULL;
    }
    sends = grown;
    send_capacity = capacity;
  }
  Send *send = &sends[send_count];
  int code = MPI_Isend(data, (int)length, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &send->request);
  if (code != MPI_SUCCESS) {
    unlock_after_mpi(locked);
    napi_delete_reference(env, ref);
    return throw_mpi(env, "MPI_Isend", code);
  }
  send->ref = ref;
  send->id = next_send_id++;
  send_count++;
  double id = send->id;
  unlock_after_mpi(locked);
  kick_progress();
  return number(env, id);
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
  bool locked = lock_for_mpi();
  int code = MPI_Send(copy, (int)length, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
  unlock_after_mpi(locked);
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
  bool locked = lock_for_mpi();
  for (int i = 0; i < send_count;) {
    int done = 0;
    MPI_Status status;
    int code = MPI_Test(&sends[i].request, &done, &status);
    if (code != MPI_SUCCESS) {
      unlock_after_mpi(locked);
      return throw_mpi(env, "MPI_Test", code);
    }
    if (!done) {
      i++;
      continue;
    }
    Send finished = sends[i];
    sends[i] = sends[--send_count];
    napi_delete_reference(env, finished.ref);
    if (napi_set_element(env, sent, sent_n++, number(env, finished.id)) != napi_ok) {
      unlock_after_mpi(locked);
      napi_throw_error(env, NULL, "offload_mpi: Node-API call failed: napi_set_element");
      return NULL;
    }
  }
  unlock_after_mpi(locked);
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
    bool locked = lock_for_mpi();
    int code = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &matched, &matched_status);
    unlock_after_mpi(locked);
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
    bool locked = lock_for_mpi();
    int code = MPI_Mrecv(data, (int)count, MPI_BYTE, &matched, MPI_STATUS_IGNORE);
    unlock_after_mpi(locked);
    matched_count = -1;
    if (code != MPI_SUCCESS) return throw_mpi(env, "MPI_Mrecv", code);
    return argv[0];
  }
  void *data = malloc(count ? count : 1);
  if (!data) {
    napi_throw_error(env, "OUT_OF_MEMORY", "offload_mpi: no memory for a received message");
    return NULL;
  }
  bool locked = lock_for_mpi();
  int code = MPI_Mrecv(data, (int)count, MPI_BYTE, &matched, MPI_STATUS_IGNORE);
  unlock_after_mpi(locked);
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
  bool locked = lock_for_mpi();
  MPI_Abort(MPI_COMM_WORLD, code);
  unlock_after_mpi(locked);
  return NULL;
}

/* finalize(withoutFence: boolean): without the closing fence when a rank of the job is gone. */
static napi_value Finalize(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool without_fence = false;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc >= 1 && napi_get_value_bool(env, argv[0], &without_fence) != napi_ok) without_fence = false;
  stop_progress(NULL);
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
      {"startProgress", NULL, StartProgress, NULL, NULL, NULL, napi_default, NULL},
      {"awaitProgress", NULL, AwaitProgress, NULL, NULL, NULL, napi_default, NULL},
      {"disarmProgress", NULL, DisarmProgress, NULL, NULL, NULL, napi_default, NULL},
      {"progressWakes", NULL, ProgressWakes, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof properties / sizeof properties[0], properties) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Module)
