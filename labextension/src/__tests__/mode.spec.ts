import {
  ENABLE_CODE,
  IKernelLike,
  STATE_EXPRESSION,
  enableInPlace,
  kernelState,
  parseMode,
  planProblem,
  planProfile,
  stateFromReply
} from '../mode';

describe('parseMode', () => {
  it('reads in-place and takes anything else as the default sidecar', () => {
    expect(parseMode('in-place')).toBe('in-place');
    expect(parseMode('sidecar')).toBe('sidecar');
    expect(parseMode(undefined)).toBe('sidecar');
    expect(parseMode('inplace')).toBe('sidecar');
  });
});

describe('planProfile', () => {
  it('runs at once in sidecar mode, whatever the kernel', () => {
    for (const state of ['in-place', 'can-enable', 'cannot-enable', 'unknown'] as const) {
      expect(planProfile('sidecar', state)).toBe('run');
    }
  });

  it('enables in-place mode first on a kernel not yet in place', () => {
    expect(planProfile('in-place', 'in-place')).toBe('run');
    expect(planProfile('in-place', 'can-enable')).toBe('enable-then-run');
    expect(planProfile('in-place', 'cannot-enable')).toBe('cannot-enable');
    expect(planProfile('in-place', 'unknown')).toBe('unknown');
  });

  it('names the cause and the fix when it cannot go on', () => {
    expect(planProblem('run')).toBeNull();
    expect(planProblem('enable-then-run')).toBeNull();
    expect(planProblem('cannot-enable')).toMatch(/server extension.*jlprof, in place.*sidecar/);
    expect(planProblem('unknown')).toMatch(/start the kernel/);
  });
});

describe('stateFromReply', () => {
  it('reads the repr of the user expression', () => {
    const ok = (text: string) => ({ status: 'ok', data: { 'text/plain': text } });
    expect(stateFromReply(ok("'in-place'"))).toBe('in-place');
    expect(stateFromReply(ok("'can-enable'"))).toBe('can-enable');
    expect(stateFromReply(ok("'cannot-enable'"))).toBe('cannot-enable');
    expect(stateFromReply(ok("'other'"))).toBe('unknown');
    expect(stateFromReply({ status: 'error', ename: 'NameError' })).toBe('unknown');
    expect(stateFromReply(undefined)).toBe('unknown');
  });
});

/**
 * A fake kernel that evaluates STATE_EXPRESSION's logic from an environment and, on
 * ENABLE_CODE, "restarts": after `restartAfter` state queries it answers from `env` with
 * JLPROF_NSYS_SESSION set (what jlprof's provisioner does).
 */
class FakeKernel implements IKernelLike {
  constructor(
    public env: Record<string, string>,
    private enableOutput: { name: string; text: string } | null = null,
    private restartAfter = 2
  ) {}
  codes: string[] = [];
  private _enabled = false;
  private _queries = 0;

  requestExecute(content: { code: string; user_expressions?: Record<string, string> }) {
    this.codes.push(content.code);
    const future = {
      onIOPub: (_: { header: { msg_type: string }; content: unknown }) => undefined,
      done: Promise.resolve({
        content: { status: 'ok', user_expressions: {} as Record<string, unknown> }
      })
    };
    if (content.code === ENABLE_CODE) {
      this._enabled = this.enableOutput === null;
      const out = this.enableOutput;
      future.done = Promise.resolve().then(() => {
        if (out) {
          future.onIOPub({ header: { msg_type: 'stream' }, content: out });
        }
        return { content: { status: 'ok', user_expressions: {} } };
      });
    }
    if (content.user_expressions) {
      expect(content.user_expressions.jlprof).toBe(STATE_EXPRESSION);
      this._queries++;
      const env = { ...this.env };
      if (this._enabled && this._queries > this.restartAfter) {
        env.JLPROF_NSYS_SESSION = '1';
      }
      const state = env.JLPROF_NSYS_SESSION
        ? 'in-place'
        : env.JLPROF_PROVISIONER
          ? 'can-enable'
          : 'cannot-enable';
      future.done = Promise.resolve({
        content: {
          status: 'ok',
          user_expressions: { jlprof: { status: 'ok', data: { 'text/plain': `'${state}'` } } }
        }
      });
    }
    return future;
  }
}

describe('kernelState', () => {
  it('asks the kernel with the state expression', async () => {
    expect(await kernelState(new FakeKernel({ JLPROF_NSYS_SESSION: 'x' }))).toBe('in-place');
    expect(await kernelState(new FakeKernel({ JLPROF_PROVISIONER: '1' }))).toBe('can-enable');
    expect(await kernelState(new FakeKernel({}))).toBe('cannot-enable');
  });

  it('is unknown when the kernel does not answer in time', async () => {
    const silent: IKernelLike = {
      requestExecute: () => ({ done: new Promise(() => undefined), onIOPub: () => undefined })
    };
    expect(await kernelState(silent, 20)).toBe('unknown');
  });
});

describe('enableInPlace', () => {
  it('runs %dlprof enable, waits for the restarted kernel in place, loads the magics', async () => {
    const kernel = new FakeKernel({ JLPROF_PROVISIONER: '1' });
    expect(await enableInPlace(() => kernel, { waitMs: 2000, pollMs: 5 })).toBeNull();
    expect(kernel.codes[0]).toBe(ENABLE_CODE);
    expect(kernel.codes[kernel.codes.length - 1]).toBe('%load_ext jlprof');
    expect(kernel.codes.filter(c => c === '').length).toBe(3); // two answers before the restart
  });

  it("returns the magic's error line when it could not enable", async () => {
    const kernel = new FakeKernel(
      {},
      { name: 'stderr', text: 'jlprof: %dlprof enable needs jlprof\'s server extension\nmore\n' }
    );
    expect(await enableInPlace(() => kernel, { waitMs: 2000, pollMs: 5 })).toBe(
      "jlprof: %dlprof enable needs jlprof's server extension"
    );
  });

  it('gives up with a message when the kernel does not come back in place', async () => {
    const kernel = new FakeKernel({ JLPROF_PROVISIONER: '1' }, null, 1e9);
    expect(await enableInPlace(() => kernel, { waitMs: 50, pollMs: 5 })).toMatch(
      /did not come back in place within 0.05 s/
    );
  });

  it('says so when the notebook has no kernel', async () => {
    expect(await enableInPlace(() => null)).toMatch(/no kernel/);
  });
});
