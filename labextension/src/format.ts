/**
 * What the Profiles sidebar shows and what an opened profile's notebook holds.
 * Pure functions (no JupyterLab import), unit-tested.
 */
import { quoteArg } from './header';

/** One profile as the server extension lists it (GET /jlprof/profiles). */
export interface IProfileEntry {
  kind: 'run' | 'reports' | 'nsys-rep' | 'sqlite';
  path: string;
  name: string;
  modified: number;
  size_bytes: number;
  database: string | null;
  open_dir: string;
  error: string | null;
  created?: string | null;
  profile_name?: string | null;
  key_node?: string | null;
  status?: string | null;
  headline?: {
    iterations?: number;
    wall_ns?: number;
    gpu_util_pct?: number;
    tc_util_pct?: number;
    avg_iter_ns?: number;
  };
}

/** One page of profiles. */
export interface IProfilePage {
  path: string;
  total: number;
  offset: number;
  limit: number;
  truncated: boolean;
  items: IProfileEntry[];
}

/** Bytes in binary units: 1536 -> '1.5 KiB'. */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** Nanoseconds in the largest unit that keeps the number >= 1: 1.5e6 -> '1.50 ms'. */
export function formatNs(ns: number): string {
  const steps: [number, string][] = [
    [1e9, 's'],
    [1e6, 'ms'],
    [1e3, 'µs']
  ];
  for (const [scale, unit] of steps) {
    if (Math.abs(ns) >= scale) {
      return `${(ns / scale).toFixed(2)} ${unit}`;
    }
  }
  return `${Math.round(ns)} ns`;
}

/** The date to show: the manifest's `created`, else the file's modification time. */
export function entryDate(entry: IProfileEntry): Date {
  if (entry.created) {
    const d = new Date(entry.created);
    if (!isNaN(d.getTime())) {
      return d;
    }
  }
  return new Date(entry.modified * 1000);
}

/** 'YYYY-MM-DD HH:MM' in UTC (stable across the machines that show it). */
export function formatDate(d: Date): string {
  return d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
}

/** The headline numbers of a run in one line ('' when the manifest has none). */
export function headlineText(entry: IProfileEntry): string {
  const h = entry.headline ?? {};
  const parts: string[] = [];
  if (h.iterations !== undefined) {
    parts.push(`${h.iterations} iter`);
  }
  if (h.avg_iter_ns !== undefined) {
    parts.push(`${formatNs(h.avg_iter_ns)}/iter`);
  }
  if (h.wall_ns !== undefined) {
    parts.push(`wall ${formatNs(h.wall_ns)}`);
  }
  if (h.gpu_util_pct !== undefined) {
    parts.push(`GPU ${h.gpu_util_pct.toFixed(1)}%`);
  }
  if (h.tc_util_pct !== undefined) {
    parts.push(`TC ${h.tc_util_pct.toFixed(1)}%`);
  }
  return parts.join(' · ');
}

/** `target` relative to the folder `fromDir` (both '/'-separated, root-relative). */
export function relativePath(fromDir: string, target: string): string {
  const from = fromDir.split('/').filter(p => p !== '');
  const to = target.split('/').filter(p => p !== '');
  let common = 0;
  while (common < from.length && common < to.length && from[common] === to[common]) {
    common += 1;
  }
  const up = from.slice(common).map(() => '..');
  return [...up, ...to.slice(common)].join('/') || '.';
}

/** The cells of the notebook that reopens a profile (run from `notebookDir`). */
export function profileCells(database: string, notebookDir: string): string[] {
  const rel = relativePath(notebookDir, database);
  return ['%load_ext jlprof', `%dlprof --database ${quoteArg(rel)}`];
}

/**
 * The names tried, in order, for the notebook that reopens `database`:
 * profile-<stem>.ipynb, then profile-<stem>-2.ipynb, ... (`attempt` counts from 0).
 */
export function profileNotebookName(database: string, attempt: number): string {
  const base = database.split('/').pop() ?? database;
  const stem = base.replace(/\.(sqlite|nsys-rep|qdrep)$/, '') || 'profile';
  return attempt === 0 ? `profile-${stem}.ipynb` : `profile-${stem}-${attempt + 1}.ipynb`;
}
