//! [`LayerWeights`], the view of one layer's tensors that the mixers read
//! their weights through. It sits below `mixers` and above `tensor`, so that
//! the mixers need nothing of `model`; [`crate::Model::layer_weights`] makes
//! one (re-exported as `model::LayerWeights`).

use crate::error::{Error, Result};
use crate::format::Role;
use crate::image::{TensorEntry, TENSOR_ENTRY_LEN};
use crate::tensor::Tensor;

/// The tensors of one layer (a view of its part of the tensor table).
#[derive(Clone, Copy, Debug)]
pub struct LayerWeights<'a> {
    /// The image the table's offsets point into.
    image: &'a [u8],
    /// The whole tensor table (validated at load).
    table: &'a [u8],
    /// Table index of the layer's first tensor.
    first: u16,
    /// Table index one past the layer's last tensor.
    end: u16,
}

impl<'a> LayerWeights<'a> {
    /// The view of entries `first..end` of `table` (a validated table of
    /// `image`: [`crate::Model::layer_weights`]).
    pub(crate) fn new(image: &'a [u8], table: &'a [u8], first: u16, end: u16) -> Self {
        LayerWeights {
            image,
            table,
            first,
            end,
        }
    }

    /// The layer's tensor with `role`. Finds the entry by its role code
    /// alone and parses only that one (the table was validated at load).
    pub fn get(&self, role: Role) -> Result<Tensor<'a>> {
        let table = self.table;
        // The layer's entries as one slice (those past the table's end, none
        // in a loaded image, are not read: as a lookup entry by entry
        // skipped them), one entry a step: no bounds test an entry.
        let start = usize::from(self.first) * TENSOR_ENTRY_LEN;
        let entries = table.get(start..).unwrap_or(&[]);
        for (index, entry) in (self.first..self.end).zip(entries.chunks(TENSOR_ENTRY_LEN)) {
            let code = entry.get(2..4).map(|b| u16::from_le_bytes([b[0], b[1]]));
            if code == Some(role as u16) {
                let e = TensorEntry::parse(table, u32::from(index))?;
                return Tensor::from_entry(self.image, &e, u32::from(index));
            }
        }
        Err(Error::MissingTensor { layer: None, role })
    }

    /// The layer's tensor with `role`, or `None` when the layer has none.
    pub fn optional(&self, role: Role) -> Result<Option<Tensor<'a>>> {
        match self.get(role) {
            Ok(t) => Ok(Some(t)),
            Err(Error::MissingTensor { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
