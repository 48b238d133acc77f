import {
  addHeader,
  buildHeader,
  hasHeader,
  quoteArg,
  removeHeader,
  toggleHeader
} from '../header';

describe('buildHeader', () => {
  it('is the bare magic without settings', () => {
    expect(buildHeader()).toBe('%%dlprof');
  });

  it('adds the options that are set, in a fixed order', () => {
    expect(
      buildHeader({
        keyNode: 'optimizer_step',
        reports: 'summary, kernel',
        outputPath: 'out dir',
        extraOptions: ' --iter_start=2 '
      })
    ).toBe(
      "%%dlprof --key_node=optimizer_step --reports=summary,kernel --output_path='out dir' --iter_start=2"
    );
  });
});

describe('quoteArg', () => {
  it('leaves plain words alone and quotes the rest like shlex', () => {
    expect(quoteArg('runs/a-1.sqlite')).toBe('runs/a-1.sqlite');
    expect(quoteArg('my run')).toBe("'my run'");
    expect(quoteArg("it's")).toBe("'it'\"'\"'s'");
    expect(quoteArg('')).toBe("''");
    expect(quoteArg('$(rm -rf x)')).toBe("'$(rm -rf x)'");
  });
});

describe('toggleHeader', () => {
  const body = 'for step in range(3):\n    train(step)\n';

  it('adds then removes the header, giving the cell back unchanged', () => {
    const on = toggleHeader(body, { keyNode: 'global_step' });
    expect(on.added).toBe(true);
    expect(on.source).toBe(`%%dlprof --key_node=global_step\n${body}`);
    const off = toggleHeader(on.source);
    expect(off.added).toBe(false);
    expect(off.source).toBe(body);
  });

  it('recognises a header typed by hand, after blank lines, with options', () => {
    const src = '\n  %%dlprof --reports=all\nx = 1';
    expect(hasHeader(src)).toBe(true);
    expect(removeHeader(src)).toBe('x = 1');
  });

  it('does not take other magics or a later %%dlprof line for the header', () => {
    expect(hasHeader('%%time\nx = 1')).toBe(false);
    expect(hasHeader('%%dlprofile\nx')).toBe(false);
    expect(hasHeader('x = 1\n%%dlprof')).toBe(false);
    expect(removeHeader('%%time\nx')).toBe('%%time\nx');
  });

  it('handles an empty cell and a header-only cell', () => {
    expect(toggleHeader('').source).toBe('%%dlprof\n');
    expect(toggleHeader('%%dlprof').source).toBe('');
  });
});

describe('addHeader', () => {
  it('keeps an existing header (profile and run does not stack headers)', () => {
    const src = '%%dlprof --key_node=a\nx';
    expect(addHeader(src, { keyNode: 'b' })).toBe(src);
    expect(addHeader('x', { keyNode: 'b' })).toBe('%%dlprof --key_node=b\nx');
  });
});
