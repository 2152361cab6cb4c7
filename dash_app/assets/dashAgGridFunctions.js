/* Every grid's columns fitted to their text (dash_app/components.py, grid()).

   Each column is sized to its widest cell and its header, on one line (AG Grid's autosize):
   once the grid is ready (the grid's columnSize "autoSize"), and again when its rows change
   (the Runs page's sort and pages), when its columns are set anew and when its width changes.
   Once sized, the columns are fitted to the grid's width:

   - wider than the grid: they give way before the grid scrolls sideways, a column of long
     text (wrapText) down to its minWidth, its text wrapping onto more lines and its rows
     growing to hold them, a column whose header is several words down to its widest cell or
     its header's longest word (the header wraps onto more lines);
   - narrower: every column grows in proportion to its width to fill the grid.

   No text is cut, and none is drawn over another's.
*/
var dagfuncs = (window.dashAgGridFunctions = window.dashAgGridFunctions || {});

(function () {
    var fitted = new WeakMap(); // grid API -> the width its columns were last fitted to
    var measure = document.createElement("canvas").getContext("2d");

    function available(api) {
        var range = api.getHorizontalPixelRange();
        return range.right - range.left;
    }

    function total(columns) {
        return columns.reduce(function (sum, c) {
            return sum + c.getActualWidth();
        }, 0);
    }

    function cellsOf(root, column) {
        var key = CSS.escape(column.getColId());
        return {
            header: root.querySelector('.ag-header-cell[col-id="' + key + '"]'),
            cells: root.querySelectorAll('.ag-center-cols-container .ag-cell[col-id="' + key + '"]'),
        };
    }

    // How wide the text inside ``element`` is drawn, from its first character to its last.
    function textWidth(element) {
        var walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
        var range = document.createRange();
        var left = Infinity;
        var right = -Infinity;
        for (var node = walker.nextNode(); node; node = walker.nextNode()) {
            if (node.textContent.trim()) {
                range.selectNodeContents(node);
                var box = range.getBoundingClientRect();
                left = Math.min(left, box.left);
                right = Math.max(right, box.right);
            }
        }
        return right > left ? right - left : 0;
    }

    // How wide ``text`` is on one line in the font of ``element``.
    function lineWidth(element, text) {
        measure.font = getComputedStyle(element).font;
        return measure.measureText(text).width;
    }

    // The narrowest a column can be with none of its text cut: its cells' text on one line,
    // its header's words each on one line beside its icons.
    function narrowest(root, column) {
        var found = cellsOf(root, column);
        var need = 0;
        found.cells.forEach(function (cell) {
            var value = cell.querySelector(".ag-cell-value") || cell;
            need = Math.max(need, cell.offsetWidth - value.clientWidth + textWidth(value));
        });
        var label = found.header && found.header.querySelector(".ag-header-cell-label");
        var text = label && label.querySelector(".ag-header-cell-text");
        if (text) {
            var icons = 0;
            Array.prototype.forEach.call(label.children, function (child) {
                icons += child === text ? 0 : child.offsetWidth;
            });
            var words = text.textContent.split(/\s+/).map(function (word) {
                return lineWidth(text, word);
            });
            var outside = found.header.offsetWidth - label.clientWidth; // padding, menu
            need = Math.max(need, outside + icons + Math.max.apply(null, words.concat([0])));
        }
        return Math.ceil(need) + 2;
    }

    // Move ``amount`` pixels among ``parts`` ({column, room}), each in proportion to its room.
    function spread(api, parts, amount, sign) {
        var room = parts.reduce(function (sum, p) {
            return sum + p.room;
        }, 0);
        if (room <= 0 || amount <= 0) {
            return;
        }
        var share = Math.min(1, amount / room);
        api.setColumnWidths(
            parts.map(function (p) {
                // growing rounds down and shrinking up: never past the grid's width
                var change = sign > 0 ? Math.floor(share * p.room) : -Math.ceil(share * p.room);
                return {key: p.column, newWidth: p.column.getActualWidth() + change};
            })
        );
    }

    function settle(api) {
        var root = document.querySelector('[grid-id="' + api.getGridId() + '"]');
        var columns = api.getColumns() || [];
        if (!root || !columns.length) {
            return;
        }
        fitted.set(api, available(api));
        var excess = total(columns) - available(api);
        if (excess > 0) {
            var giving = columns.map(function (c) {
                var definition = c.getColDef();
                var header = (definition.headerName || definition.field || "").trim();
                var floor = definition.wrapText
                    ? definition.minWidth || 0
                    : /\s/.test(header)
                      ? narrowest(root, c)
                      : c.getActualWidth();
                return {column: c, room: Math.max(0, c.getActualWidth() - floor)};
            });
            spread(api, giving, excess, -1);
            return;
        }
        // the room left to every column in proportion to its width (AG Grid's own
        // sizeColumnsToFit makes them alike)
        var alike = columns.map(function (c) {
            return {column: c, room: c.getActualWidth()};
        });
        spread(api, alike, -excess, 1);
    }

    dagfuncs.fitColumns = function (params) {
        var api = params.api;
        if (!api || api.isDestroyed()) {
            return;
        }
        if (params.type === "columnResized") {
            if (params.source === "autosizeColumns" && params.finished) {
                settle(api);
            }
            return;
        }
        var now = available(api);
        if (params.type === "gridSizeChanged" && fitted.get(api) === now) {
            return; // only taller (its rows grew): the columns stay as they are
        }
        fitted.set(api, now);
        api.autoSizeAllColumns(); // its "columnResized" event settles them (above)
    };
})();
