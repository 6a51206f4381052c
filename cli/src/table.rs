//! Tables for people, as `kubectl get` and `kafka-topics --describe` print them: a header row,
//! aligned columns two spaces apart, no borders, numbers right-aligned (comfy-table). Scripts
//! use `--json` instead.

use comfy_table::{presets, CellAlignment, Table};

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: flush left.
    Left,
    /// Numbers: flush right.
    Right,
}

/// Renders `rows` under `header` (`(title, alignment)` per column), one line each, ending in a
/// newline; trailing spaces are trimmed.
pub fn render(header: &[(&str, Align)], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING);
    table.set_header(header.iter().map(|(title, _)| *title));
    for row in rows {
        table.add_row(row);
    }
    let last = header.len().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if i == last { 0 } else { 2 }));
        if header.get(i).is_some_and(|(_, a)| *a == Align::Right) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_numbers_right_text_left_without_borders() {
        let out = render(
            &[
                ("TOPIC", Align::Left),
                ("FRAGMENTS", Align::Right),
                ("POLICY", Align::Left),
            ],
            vec![
                vec!["orders".into(), "3".into(), "default".into()],
                vec![
                    "a-much-longer-topic".into(),
                    "12".into(),
                    "distribution".into(),
                ],
            ],
        );
        assert_eq!(
            out,
            "TOPIC                FRAGMENTS  POLICY\n\
             orders                       3  default\n\
             a-much-longer-topic         12  distribution\n"
        );
    }

    #[test]
    fn an_empty_table_is_its_header() {
        let out = render(&[("ID", Align::Right), ("NAME", Align::Left)], Vec::new());
        assert_eq!(out, "ID  NAME\n");
    }
}
