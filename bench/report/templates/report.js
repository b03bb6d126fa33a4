/* Sortable tables of the report page (inlined into index.html by bench/report/html): a click on
   a column header sorts the rows by that column, numbers by value, text alphabetically, empty
   cells last; a second click reverses. */
(function () {
  "use strict";
  function key(cell) {
    var t = cell ? (cell.textContent || "").trim() : "";
    if (t === "") { return [2, ""]; }
    var m = t.replace(/,/g, "").match(/^[-+]?\d+(\.\d+)?([eE][-+]?\d+)?/);
    return m ? [0, parseFloat(m[0])] : [1, t.toLowerCase()];
  }
  function sortBy(table, th, col) {
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var heads = table.tHead.rows[0].cells;
    for (var h = 0; h < heads.length; h++) { heads[h].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (r, i) {
      return { row: r, key: key(r.cells[col]), i: i };
    });
    rows.sort(function (a, b) {
      if (a.key[0] !== b.key[0]) { return a.key[0] - b.key[0]; }
      var c = a.key[1] < b.key[1] ? -1 : (a.key[1] > b.key[1] ? 1 : 0);
      return (asc ? c : -c) || a.i - b.i;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    if (!table.tHead || !table.tBodies.length) { return; }
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      var b = th.querySelector("button.sort");
      if (b) { b.addEventListener("click", function () { sortBy(table, th, col); }); }
    });
  });
})();
