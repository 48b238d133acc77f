import {
  IProfileEntry,
  entryDate,
  formatBytes,
  formatDate,
  formatNs,
  headlineText,
  profileCells,
  profileNotebookName,
  relativePath
} from '../format';

const run: IProfileEntry = {
  kind: 'run',
  path: 'proj/jlprof_runs/20261123-180000-ab12',
  name: '20261123-180000-ab12',
  modified: 0,
  size_bytes: 1536,
  database: 'proj/jlprof_runs/20261123-180000-ab12/nsys_profile.sqlite',
  open_dir: 'proj',
  error: null,
  created: '2026-11-23T18:00:00Z',
  headline: {
    iterations: 3,
    wall_ns: 30450,
    gpu_util_pct: 41.5,
    tc_util_pct: 12.25,
    avg_iter_ns: 10000
  }
};

describe('units', () => {
  it('formats bytes in binary units', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(5 * 1024 ** 3)).toBe('5.0 GiB');
  });

  it('formats nanoseconds in the largest fitting unit', () => {
    expect(formatNs(999)).toBe('999 ns');
    expect(formatNs(30450)).toBe('30.45 µs');
    expect(formatNs(1.5e6)).toBe('1.50 ms');
    expect(formatNs(2e9)).toBe('2.00 s');
  });
});

describe('headline and date', () => {
  it('shows the manifest numbers in one line', () => {
    expect(headlineText(run)).toBe(
      '3 iter · 10.00 µs/iter · wall 30.45 µs · GPU 41.5% · TC 12.3%'
    );
  });

  it('shows only what the manifest has', () => {
    expect(headlineText({ ...run, headline: { gpu_util_pct: 7 } })).toBe('GPU 7.0%');
    expect(headlineText({ ...run, headline: undefined })).toBe('');
  });

  it('uses created, else the modification time', () => {
    expect(formatDate(entryDate(run))).toBe('2026-11-23 18:00 UTC');
    const raw = { ...run, created: 'not a date', modified: 86400 };
    expect(formatDate(entryDate(raw))).toBe('1970-01-02 00:00 UTC');
  });
});

describe('profile notebook', () => {
  it('computes paths relative to the notebook folder', () => {
    expect(relativePath('proj', 'proj/jlprof_runs/a/x.sqlite')).toBe('jlprof_runs/a/x.sqlite');
    expect(relativePath('', 'traces/x.nsys-rep')).toBe('traces/x.nsys-rep');
    expect(relativePath('a/b', 'a/c/x.sqlite')).toBe('../c/x.sqlite');
  });

  it('loads the extension and reanalyses the database', () => {
    expect(profileCells(run.database!, run.open_dir)).toEqual([
      '%load_ext jlprof',
      '%dlprof --database jlprof_runs/20261123-180000-ab12/nsys_profile.sqlite'
    ]);
    expect(profileCells('my traces/a b.sqlite', '')).toEqual([
      '%load_ext jlprof',
      "%dlprof --database 'my traces/a b.sqlite'"
    ]);
  });
});

describe('profile notebook name', () => {
  it('is named for the database, numbered when taken', () => {
    expect(profileNotebookName('proj/jlprof_runs/x/nsys_profile.sqlite', 0)).toBe(
      'profile-nsys_profile.ipynb'
    );
    expect(profileNotebookName('traces/t.nsys-rep', 1)).toBe('profile-t-2.ipynb');
    expect(profileNotebookName('t.qdrep', 2)).toBe('profile-t-3.ipynb');
    expect(profileNotebookName('a.b/run.sqlite', 0)).toBe('profile-run.ipynb');
  });
});
