import { h, replace } from "./dom";

const OVERSCAN = 6;
/** `.grid-scroll`'s max-height in dashboard.css. */
const MAX_VIEWPORT_PX = 480;

/**
 * A table that draws only the rows in view (plus a few either side): a site of 500 or 5,000 devices
 * costs the same DOM as one screenful. Rows have one fixed height (see dashboard.css, `.grid tr`);
 * blank spacer rows above and below stand in for the rest, so the scroll bar is true.
 */
export class VirtualTable<T> {
  readonly element: HTMLElement;
  private readonly body: HTMLTableSectionElement;
  private rows: T[] = [];
  private frame = 0;

  constructor(
    private readonly columns: string[],
    private readonly rowHeight: number,
    private readonly renderRow: (row: T) => HTMLTableRowElement,
    caption: string,
  ) {
    this.body = h("tbody");
    const table = h("table", { class: "grid" },
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      this.body);
    this.element = h("div", { class: "grid-scroll", tabindex: 0, role: "region", "aria-label": caption }, table);
    this.element.addEventListener("scroll", () => this.schedule());
    window.addEventListener("resize", () => this.schedule());
  }

  setRows(rows: T[]) {
    this.rows = rows;
    this.schedule();
  }

  /** Redraws on the next frame; many changes in one frame cost one redraw. */
  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private draw() {
    // The container grows with its rows up to its CSS max-height; draw for that much even while it is shorter.
    const viewport = Math.max(this.element.clientHeight, MAX_VIEWPORT_PX);
    const first = Math.max(0, Math.floor(this.element.scrollTop / this.rowHeight) - OVERSCAN);
    const last = Math.min(this.rows.length, Math.ceil((this.element.scrollTop + viewport) / this.rowHeight) + OVERSCAN);
    const spacer = (count: number) => {
      const cell = h("td", { colspan: this.columns.length });
      const row = h("tr", { class: "spacer", "aria-hidden": "true" }, cell);
      row.style.height = `${count * this.rowHeight}px`;
      return row;
    };
    replace(this.body,
      first > 0 ? spacer(first) : null,
      this.rows.slice(first, last).map(this.renderRow),
      last < this.rows.length ? spacer(this.rows.length - last) : null);
  }
}
