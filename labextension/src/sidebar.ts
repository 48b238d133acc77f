/** The Profiles sidebar: profile runs and nsys files under the server root, newest first. */
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { listProfiles } from './api';
import {
  IProfileEntry,
  entryDate,
  formatBytes,
  formatDate,
  headlineText
} from './format';

const PAGE = 50;
const KIND_LABEL: Record<IProfileEntry['kind'], string> = {
  run: 'run',
  reports: 'reports',
  'nsys-rep': 'nsys-rep',
  sqlite: 'sqlite'
};

export class ProfilesSidebar extends Widget {
  constructor(commands: CommandRegistry, openCommand: string, insertCommand: string) {
    super();
    this._commands = commands;
    this._openCommand = openCommand;
    this._insertCommand = insertCommand;
    this.addClass('jlprof-Sidebar');
    const head = document.createElement('div');
    head.className = 'jlprof-Sidebar-header';
    const title = document.createElement('span');
    title.textContent = 'Profiles';
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button jlprof-Sidebar-refresh';
    refresh.textContent = 'Refresh';
    refresh.title = 'List the profiles under the server root again';
    refresh.onclick = () => void this.refresh();
    head.append(title, refresh);
    this._status = document.createElement('div');
    this._status.className = 'jlprof-Sidebar-status';
    this._list = document.createElement('ul');
    this._list.className = 'jlprof-Sidebar-list';
    this._more = document.createElement('button');
    this._more.className = 'jp-Button jlprof-Sidebar-more';
    this._more.textContent = 'More…';
    this._more.onclick = () => void this._load(this._loaded);
    this.node.append(head, this._status, this._list, this._more);
  }

  /** List the first page again. */
  async refresh(): Promise<void> {
    this._list.replaceChildren();
    this._loaded = 0;
    await this._load(0);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refresh();
  }

  private async _load(offset: number): Promise<void> {
    this._status.textContent = 'Looking for profiles…';
    try {
      const page = await listProfiles('', offset, PAGE);
      if (offset !== this._loaded) {
        return; // a refresh started meanwhile
      }
      for (const entry of page.items) {
        this._list.appendChild(this._item(entry));
      }
      this._loaded += page.items.length;
      this._more.style.display = this._loaded < page.total ? '' : 'none';
      this._status.textContent =
        page.total === 0
          ? 'No profiles yet: run a cell with %%dlprof (or the Profile button).'
          : `${page.total} profile${page.total === 1 ? '' : 's'}` +
            (page.truncated ? ' (search stopped early: very many files)' : '');
    } catch (err) {
      this._status.textContent = `Could not list profiles: ${(err as Error).message}`;
    }
  }

  private _item(entry: IProfileEntry): HTMLElement {
    const li = document.createElement('li');
    li.className = 'jlprof-ProfileItem';
    li.dataset.path = entry.path;
    li.title = entry.path;
    const top = document.createElement('div');
    top.className = 'jlprof-ProfileItem-top';
    const name = document.createElement('span');
    name.className = 'jlprof-ProfileItem-name';
    name.textContent = entry.path;
    const kind = document.createElement('span');
    kind.className = 'jlprof-ProfileItem-kind';
    kind.textContent = KIND_LABEL[entry.kind] ?? entry.kind;
    top.append(name, kind);
    const meta = document.createElement('div');
    meta.className = 'jlprof-ProfileItem-meta';
    meta.textContent = `${formatDate(entryDate(entry))} · ${formatBytes(entry.size_bytes)}`;
    li.append(top, meta);
    const headline = headlineText(entry);
    if (headline) {
      const h = document.createElement('div');
      h.className = 'jlprof-ProfileItem-headline';
      h.textContent = headline;
      li.appendChild(h);
    }
    if (entry.error) {
      const e = document.createElement('div');
      e.className = 'jlprof-ProfileItem-error';
      e.textContent = entry.error;
      li.appendChild(e);
    }
    const open = document.createElement('button');
    open.className = 'jp-Button jlprof-ProfileItem-open';
    open.textContent = 'Open in notebook';
    open.disabled = !entry.database;
    open.onclick = () =>
      void this._commands.execute(this._openCommand, {
        database: entry.database ?? '',
        openDir: entry.open_dir
      });
    const insert = document.createElement('button');
    insert.className = 'jp-Button jlprof-ProfileItem-insert';
    insert.textContent = 'Insert in current notebook';
    insert.disabled = !entry.database;
    insert.onclick = () =>
      void this._commands.execute(this._insertCommand, { database: entry.database ?? '' });
    const actions = document.createElement('div');
    actions.className = 'jlprof-ProfileItem-actions';
    actions.append(open, insert);
    li.appendChild(actions);
    li.ondblclick = () => open.click();
    return li;
  }

  private _commands: CommandRegistry;
  private _openCommand: string;
  private _insertCommand: string;
  private _status: HTMLElement;
  private _list: HTMLElement;
  private _more: HTMLButtonElement;
  private _loaded = 0;
}
