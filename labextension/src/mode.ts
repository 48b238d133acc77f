/**
 * The extension's `mode` setting: "sidecar" profiles in jlprof's sidecar kernel (nothing to
 * prepare); "in-place" profiles in the notebook's own kernel, which must run under nsys, so the
 * profile command first runs `%dlprof enable` (a kernel restart) on a kernel not yet in place.
 * The kernel's state is read from two environment variables jlprof sets (no magic needed):
 * JLPROF_NSYS_SESSION (under nsys launch, in place) and JLPROF_PROVISIONER (jlprof's server
 * extension started it, so `%dlprof enable` can restart it). Pure functions plus a small kernel
 * driver typed by the few calls it makes, so jest tests it without a browser or a kernel.
 */

export type Mode = 'sidecar' | 'in-place';

/** The kernel as the mode logic sees it: in place, can be switched, cannot, or not known. */
export type KernelState = 'in-place' | 'can-enable' | 'cannot-enable' | 'unknown';

/** What the profile command does before adding the header and running the cell. */
export type Plan = 'run' | 'enable-then-run' | 'cannot-enable' | 'unknown';

/** The setting's value, anything but "in-place" read as the default "sidecar". */
export function parseMode(value: unknown): Mode {
  return value === 'in-place' ? 'in-place' : 'sidecar';
}

/** A user expression (silent, no history, no magics) that names the kernel's state. */
export const STATE_EXPRESSION =
  "(lambda e: 'in-place' if e.get('JLPROF_NSYS_SESSION') else " +
  "'can-enable' if e.get('JLPROF_PROVISIONER') else 'cannot-enable')" +
  "(__import__('os').environ)";

/** Code that switches the kernel to in-place mode (it restarts; its variables are lost). */
export const ENABLE_CODE = '%load_ext jlprof\n%dlprof enable';

/** Loads the magics in the restarted kernel, so the cell's %%dlprof header runs. */
export const LOAD_CODE = '%load_ext jlprof';

/** The kernel state from an execute reply's `user_expressions` entry. */
export function stateFromReply(entry: unknown): KernelState {
  const e = entry as { status?: string; data?: Record<string, unknown> } | undefined;
  if (!e || e.status !== 'ok' || !e.data) {
    return 'unknown';
  }
  const text = String(e.data['text/plain'] ?? '').replace(/^'|'$/g, '');
  return text === 'in-place' || text === 'can-enable' || text === 'cannot-enable'
    ? text
    : 'unknown';
}

/** What to do for `mode` on a kernel in `state`. */
export function planProfile(mode: Mode, state: KernelState): Plan {
  if (mode === 'sidecar' || state === 'in-place') {
    return 'run';
  }
  if (state === 'can-enable') {
    return 'enable-then-run';
  }
  return state;
}

/** The one-line message for a plan that cannot go on (cause and fix), or null. */
export function planProblem(plan: Plan): string | null {
  if (plan === 'cannot-enable') {
    return (
      "jlprof: in-place mode needs this kernel started by jlprof's server extension " +
      "(restart the kernel) or the kernel 'Python 3 (jlprof, in place)'; or set the " +
      "jlprof setting Mode to sidecar"
    );
  }
  if (plan === 'unknown') {
    return 'jlprof: could not ask the kernel whether it runs in place: start the kernel and try again';
  }
  return null;
}

/** The slice of a kernel connection the driver uses (IKernelConnection has it). */
export interface IKernelLike {
  requestExecute(content: {
    code: string;
    silent?: boolean;
    store_history?: boolean;
    user_expressions?: Record<string, string>;
    stop_on_error?: boolean;
  }): {
    done: Promise<{ content: { status: string; user_expressions?: Record<string, unknown> } }>;
    onIOPub(msg: { header: { msg_type: string }; content: unknown }): void;
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise(resolve => {
    const timer = setTimeout(() => resolve(undefined), ms);
    promise.then(
      value => {
        clearTimeout(timer);
        resolve(value);
      },
      () => {
        clearTimeout(timer);
        resolve(undefined);
      }
    );
  });
}

/** The kernel's state, or 'unknown' when it does not answer within `timeoutMs`. */
export async function kernelState(kernel: IKernelLike, timeoutMs = 10000): Promise<KernelState> {
  const reply = await withTimeout(
    kernel.requestExecute({
      code: '',
      silent: true,
      store_history: false,
      user_expressions: { jlprof: STATE_EXPRESSION }
    }).done,
    timeoutMs
  );
  return stateFromReply(reply?.content.user_expressions?.jlprof);
}

/**
 * Run `%dlprof enable` and wait until the kernel, restarted by jlprof's server extension,
 * runs in place; then load the magics. Returns null on success, else the one-line problem
 * (the magic's own error when it printed one). `getKernel` is asked again after the restart.
 */
export async function enableInPlace(
  getKernel: () => IKernelLike | null,
  { waitMs = 90000, pollMs = 1000 } = {}
): Promise<string | null> {
  const kernel = getKernel();
  if (!kernel) {
    return 'jlprof: this notebook has no kernel: start one and try again';
  }
  const future = kernel.requestExecute({ code: ENABLE_CODE, store_history: false });
  let errors = '';
  future.onIOPub = msg => {
    const c = msg.content as { name?: string; text?: string; ename?: string; evalue?: string };
    if (msg.header.msg_type === 'stream' && c.name === 'stderr') {
      errors += c.text ?? '';
    } else if (msg.header.msg_type === 'error') {
      errors += `${c.ename}: ${c.evalue}`;
    }
  };
  await withTimeout(future.done, waitMs);
  if (errors.trim()) {
    return errors.trim().split('\n')[0];
  }
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, pollMs));
    const current = getKernel();
    if (current && (await kernelState(current, pollMs * 5)) === 'in-place') {
      await withTimeout(
        current.requestExecute({ code: LOAD_CODE, silent: true, store_history: false }).done,
        waitMs
      );
      return null;
    }
  }
  return `jlprof: the kernel did not come back in place within ${waitMs / 1000} s: see the server log`;
}
